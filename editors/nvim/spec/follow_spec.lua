-- A user who runs Claude Code and opens the workspace in Neovim sees that agent's live budget
-- with nothing set up: the plugin against the real daemon (`soba serve --standalone`, from
-- $SOBA_BIN), which finds the transcript in the agent's (temporary) home, follows it as it grows
-- and lets it go when the agent is idle.
local soba = require('soba')
local format = require('soba.format')

local WAIT_MS = 15000
--- Long enough for the spec's own steps between writes, short enough to wait for.
local IDLE_SECS = 8

local WORDS = vim.split(
  'the parser reads each token from the input stream and builds a syntax tree that the checker '
    .. 'walks twice once to collect declarations and once to resolve every reference against scopes '
    .. 'while the emitter writes bytecode for functions closures loops and pattern matches',
  ' '
)

--- About `tokens` tokens of varied English, different for every seed.
local function prose(seed, tokens)
  local out = { 'Step ' .. seed .. ':' }
  local i = 0
  while #out < tokens do
    out[#out + 1] = WORDS[(seed * 7 + i * 3) % #WORDS + 1]
    i = i + 1
  end
  return table.concat(out, ' ')
end

local tmp = vim.fn.tempname()
local env
local daemon_exit

--- Claude Code's project folder name: every character but ASCII letters and digits becomes `-`.
local function claude_project_dir(cwd)
  return (cwd:gsub('[^%w]', '-'))
end

local function append(file, records)
  local lines = {}
  for _, record in ipairs(records) do
    lines[#lines + 1] = vim.json.encode(record)
  end
  local handle = assert(io.open(file, 'a'))
  handle:write(table.concat(lines, '\n') .. '\n')
  handle:close()
end

--- A Claude Code session writing its transcript the way Claude Code does.
local function claude_session(workspace, id)
  local dir = tmp .. '/claude/projects/' .. claude_project_dir(workspace)
  vim.fn.mkdir(dir, 'p')
  local session = { file = dir .. '/' .. id .. '.jsonl', turn = 0, parent = vim.NIL }

  local function record(kind, message)
    local uuid = string.format('%s%s-%d', kind:sub(1, 1), id, session.turn)
    local rec = {
      type = kind,
      uuid = uuid,
      parentUuid = session.parent,
      sessionId = id,
      cwd = workspace,
      version = '2.0.27',
      timestamp = os.date('!%Y-%m-%dT%H:%M:%SZ'),
      message = message,
    }
    session.parent = uuid
    return rec
  end

  session.model = 'claude-sonnet-4-5'

  local function response(content, input_tokens)
    return record('assistant', {
      id = string.format('msg_%s_%d', id, session.turn),
      model = session.model,
      role = 'assistant',
      type = 'message',
      content = content,
      usage = { input_tokens = input_tokens, output_tokens = 10 },
    })
  end

  --- A prompt and a text answer whose API call used `input_tokens`.
  function session.prompt(text, input_tokens)
    session.turn = session.turn + 1
    append(session.file, {
      record('user', { role = 'user', content = text }),
      response({ { type = 'text', text = 'Done: ' .. text } }, input_tokens),
    })
  end

  --- The user's prompt alone: the agent has not answered yet.
  function session.prompt_only(text)
    session.turn = session.turn + 1
    append(session.file, { record('user', { role = 'user', content = text }) })
  end

  --- The answer to the prompt written last.
  function session.answer(text, input_tokens)
    append(session.file, { response({ { type = 'text', text = text } }, input_tokens) })
  end

  --- Claude Code compacting its own context: the `compact_boundary` record (a new root, its
  --- logical parent the last record) and the summary it continues from.
  function session.compact(pre_tokens, summary)
    local boundary = string.format('cb%s-%d', id, session.turn)
    append(session.file, {
      {
        type = 'system',
        subtype = 'compact_boundary',
        uuid = boundary,
        parentUuid = vim.NIL,
        logicalParentUuid = session.parent,
        sessionId = id,
        cwd = workspace,
        timestamp = os.date('!%Y-%m-%dT%H:%M:%SZ'),
        compactMetadata = { trigger = 'auto', preTokens = pre_tokens },
      },
    })
    session.parent = boundary
    local rec = record('user', { role = 'user', content = 'This session is being continued from a previous conversation. ' .. summary })
    rec.isCompactSummary = true
    -- Its own uuid: the prompt of this turn already has the one `record` gives.
    rec.uuid = 's' .. boundary
    session.parent = rec.uuid
    append(session.file, { rec })
  end

  --- A response calling Bash, then its result: about `result_tokens` tokens of output.
  function session.tool_call(command, input_tokens, result_tokens)
    session.turn = session.turn + 1
    local call_id = string.format('toolu_%s_%d', id, session.turn)
    append(session.file, {
      response({ { type = 'tool_use', id = call_id, name = 'Bash', input = { command = command } } }, input_tokens),
      record('user', {
        role = 'user',
        content = { { type = 'tool_result', tool_use_id = call_id, content = prose(session.turn, result_tokens), is_error = false } },
      }),
    })
  end

  return session
end

local imports = 0

--- The budget `soba import` + `soba budget` give for the transcript as it is now.
local function imported_budget(transcript)
  imports = imports + 1
  local out = string.format('%s/imported/%d.jsonl', tmp, imports)
  local imported = vim.system({ vim.env.SOBA_BIN, 'import', transcript, '--output', out, '--json' }, { env = env }):wait()
  assert.are.equal(0, imported.code, imported.stderr)
  local measured = vim.system({ vim.env.SOBA_BIN, 'budget', out, '--json' }, { env = env }):wait()
  assert.are.equal(0, measured.code, measured.stderr)
  return vim.json.decode(measured.stdout)
end

--- Where Claude Code compacts itself for the budget's model: its window less what it keeps for
--- output (at most 20k) less its 13k auto-compact buffer.
local function claude_code_compacts_at(budget)
  return budget.contextWindow - math.min(budget.maxOutputTokens, 20000) - 13000
end

--- The statusline of a followed Claude Code session: measured against where it compacts itself.
local function text_of(budget)
  return format.tokens(budget.effectiveTokens) .. ' / ' .. format.tokens(claude_code_compacts_at(budget))
end

local function wait_for(what, predicate, ms)
  local ok = vim.wait(ms or WAIT_MS, function()
    return daemon_exit ~= nil or predicate()
  end, 20)
  if not ok or daemon_exit ~= nil then
    error(
      string.format(
        'timed out waiting for %s%s; the statusline shows %q',
        what,
        daemon_exit and (' (the daemon exited with ' .. daemon_exit .. ')') or '',
        soba.statusline()
      ),
      2
    )
  end
end

local function statusline_shows(expected, what, ms)
  wait_for(what .. ' (' .. expected .. ')', function()
    return soba.statusline() == expected
  end, ms)
end

--- A workspace folder (with `.git`, as a real project has) and a buffer of it.
local function open_workspace(name)
  local dir = tmp .. '/' .. name
  vim.fn.mkdir(dir .. '/.git', 'p')
  dir = vim.uv.fs_realpath(dir)
  vim.cmd.edit(vim.fn.fnameescape(dir .. '/main.rs'))
  wait_for('the soba client of ' .. name, function()
    local client = soba.client()
    return client ~= nil and client.initialized == true and soba.workspace(client) == dir
  end)
  return dir
end

describe('a running agent in the statusline', function()
  local bin = vim.env.SOBA_BIN
  local original_request_budget
  local asked = 0

  setup(function()
    assert.is_truthy(bin and vim.fn.executable(bin) == 1, 'set SOBA_BIN to the soba binary (scripts/test does)')
    vim.fn.mkdir(tmp, 'p')
    tmp = vim.uv.fs_realpath(tmp)
    for _, dir in ipairs({ 'home', 'claude', 'data', 'runtime', 'config', 'xdg-data', 'imported' }) do
      vim.fn.mkdir(tmp .. '/' .. dir, 'p')
    end
    -- The daemon reads only these homes: no real transcript, config or daemon is touched.
    env = {
      HOME = tmp .. '/home',
      CLAUDE_CONFIG_DIR = tmp .. '/claude',
      CODEX_HOME = tmp .. '/codex',
      PI_CODING_AGENT_DIR = tmp .. '/pi',
      SOBA_DATA_DIR = tmp .. '/data',
      SOBA_RUNTIME_DIR = tmp .. '/runtime',
      SOBA_CONFIG = tmp .. '/no-user-config.json',
      XDG_CONFIG_HOME = tmp .. '/config',
      XDG_DATA_HOME = tmp .. '/xdg-data',
      SOBA_ATTACH_IDLE_SECS = tostring(IDLE_SECS),
    }
    original_request_budget = soba.request_budget
    -- Counts the plugin's requests for the budget (on attach, on close and the retries).
    soba.request_budget = function(client)
      asked = asked + 1
      return original_request_budget(client)
    end
    require('soba').setup({
      cmd = { bin, 'serve', '--standalone' },
      notify_compaction = false,
      lsp = {
        cmd_env = env,
        on_exit = function(code)
          daemon_exit = code
        end,
      },
    })
  end)

  teardown(function()
    soba.request_budget = original_request_budget
    for _, client in ipairs(vim.lsp.get_clients({ name = 'soba' })) do
      client:stop()
    end
    vim.wait(5000, function()
      return #vim.lsp.get_clients({ name = 'soba' }) == 0
    end)
    vim.cmd('silent! %bwipeout!')
    vim.fn.delete(tmp, 'rf')
  end)

  it('shows the Claude Code budget, follows the transcript, blanks when the agent is idle and shows its next session', function()
    local workspace = tmp .. '/my_app'
    vim.fn.mkdir(workspace .. '/.git', 'p')
    workspace = vim.uv.fs_realpath(workspace)
    local agent = claude_session(workspace, '7d1c2f')
    agent.prompt('list the files', 2000)
    assert.are.equal(workspace, open_workspace('my_app'))

    local first = imported_budget(agent.file)
    assert.are.equal(2010, first.effectiveTokens, 'the provider usage of the last response')
    statusline_shows(text_of(first), "the transcript's budget")
    assert.are.equal('claude-code-7d1c2f', soba.report().sessionId)
    assert.are.equal('provider_usage', soba.report().source)

    -- The agent works on: a tool call with a large result, then the next response.
    agent.tool_call('cat src/parser.rs', 2100, 4000)
    local grown = imported_budget(agent.file)
    assert.is_true(grown.effectiveTokens > first.effectiveTokens + 3000, first.effectiveTokens .. ' → ' .. grown.effectiveTokens)
    statusline_shows(text_of(grown), 'the budget with the large tool result')
    agent.prompt('now fix the failing test', 6500)
    local answered = imported_budget(agent.file)
    assert.are.equal(6510, answered.effectiveTokens)
    statusline_shows(text_of(answered), 'the budget of the next response')
    assert.are.equal('%#SobaBudgetOk#' .. text_of(answered) .. '%*', soba.statusline_hl())

    -- Quiet for the idle time: the session closes and the statusline goes blank.
    asked = 0
    statusline_shows(soba.IDLE_TEXT, 'the statusline to say no agent session once the agent is idle', (IDLE_SECS + 10) * 1000)
    -- It asks at once (there is no other session yet), and again while it shows nothing.
    wait_for('the budget asked for again', function()
      return asked >= 2
    end, soba.BUDGET_RETRY_MS + WAIT_MS)

    local next_session = claude_session(workspace, '9e4a01')
    next_session.prompt('start over', 3300)
    statusline_shows(text_of(imported_budget(next_session.file)), 'the next session', soba.BUDGET_RETRY_MS + WAIT_MS)
    assert.are.equal('claude-code-9e4a01', soba.report().sessionId)
  end)

  it('shows an agent started after the workspace was opened', function()
    asked = 0
    local workspace = open_workspace('late_app')
    -- Asked on attach, found nothing, and asked again: still nothing to show.
    wait_for('the budget asked for again', function()
      return asked >= 2
    end, soba.BUDGET_RETRY_MS + WAIT_MS)
    assert.are.equal(soba.IDLE_TEXT, soba.statusline(), 'connected, nothing to count yet')

    local agent = claude_session(workspace, 'b7710c')
    agent.prompt('hello', 1500)
    statusline_shows(text_of(imported_budget(agent.file)), "the new agent's budget", soba.BUDGET_RETRY_MS + WAIT_MS)
    assert.are.equal('claude-code-b7710c', soba.report().sessionId)
  end)

  it('previews what SOBA would send for an agent that compacts itself, and changes nothing', function()
    local workspace = tmp .. '/followed_app'
    vim.fn.mkdir(workspace .. '/.git', 'p')
    vim.fn.mkdir(workspace .. '/.soba', 'p')
    workspace = vim.uv.fs_realpath(workspace)
    vim.fn.writefile({ vim.json.encode({ compaction = { keepRecentTokens = 600 } }) }, workspace .. '/.soba/config.json')
    local agent = claude_session(workspace, 'f011ow')
    for i = 1, 6 do
      agent.tool_call('cat src/part' .. i .. '.rs', 1000 * i, 700)
    end
    agent.prompt('now fix the failing test', 9000)
    -- Claude Code holds its transcript open while it runs: the session stays followed however
    -- long the steps below take.
    local running = assert(io.open(agent.file, 'r'))
    open_workspace('followed_app')
    statusline_shows(text_of(imported_budget(agent.file)), "the followed agent's budget")
    local report = soba.report()
    assert.are.equal('agent', report.control.compactedBy)
    assert.are.equal('Claude Code compacts this session itself; SOBA follows it.', report.control.note)
    assert.are.same(report.control.note, format.budget_lines(report)[6])
    local log = vim.fn.glob(tmp .. '/data/workspaces/*/sessions/claude-code-f011ow.jsonl')
    local function capsules()
      return #vim.tbl_filter(function(line)
        return line:find('"type":"capsule"', 1, true) ~= nil
      end, vim.fn.readfile(log))
    end

    vim.cmd('Soba compact keep the parser work')
    wait_for('the preview buffer', function()
      return vim.fn.bufnr('soba://preview') ~= -1
    end)
    local lines = vim.api.nvim_buf_get_lines(vim.fn.bufnr('soba://preview'), 0, -1, false)
    assert.are.equal('# What SOBA would send after compacting', lines[1])
    assert.matches('^> Preview: nothing was changed', lines[3])
    assert.are.equal('> ' .. report.control.note, lines[4])
    assert.is_truthy(table.concat(lines, '\n'):find('Context Capsule', 1, true))
    assert.are.equal('markdown', vim.bo[vim.fn.bufnr('soba://preview')].filetype)
    assert.are.equal(0, capsules(), 'nothing appended as if Claude Code took it')

    -- Back in the workspace's buffer (commands act on its workspace), a capsule may be created:
    -- it changes no input. Rewinding to it is a preview too.
    vim.cmd('bwipeout! soba://preview')
    vim.cmd('Soba capsule create parser hand-off')
    local ids
    wait_for('the created capsule', function()
      ids = require('soba.commands').checkpoint_ids()
      return #ids == 1
    end)
    local original_confirm = require('soba.commands').confirm
    local asked = false
    require('soba.commands').confirm = function()
      asked = true
      return true
    end
    vim.cmd('Soba rewind ' .. ids[1])
    wait_for('the rewind preview', function()
      return vim.fn.bufnr('soba://preview') ~= -1
    end)
    require('soba.commands').confirm = original_confirm
    assert.is_false(asked, 'nothing to confirm: nothing changes')
    assert.are.equal(
      '# What SOBA would send after rewinding',
      vim.api.nvim_buf_get_lines(vim.fn.bufnr('soba://preview'), 0, 1, false)[1]
    )
    -- One basis with the statusline: the preview's "before" is the budget's total, and its
    -- "after" keeps what is not in the log.
    local sizes
    for _, line in ipairs(vim.api.nvim_buf_get_lines(vim.fn.bufnr('soba://preview'), 0, -1, false)) do
      sizes = sizes or { line:match('^(%S+) → (%S+) tokens, ') }
      if #sizes == 0 then
        sizes = nil
      end
    end
    assert.is_truthy(sizes, 'the sizes line')
    assert.are.equal(string.format('%.1fk', soba.report().effectiveTokens / 1000), sizes[1])
    assert.are.equal(report.effectiveTokens, soba.report().effectiveTokens)
    vim.cmd('bwipeout! soba://preview')
    -- What fills the window says who compacts, not where SOBA would start.
    vim.cmd('Soba context')
    wait_for('the context buffer', function()
      return vim.fn.bufnr('soba://context') ~= -1
    end)
    local first = vim.api.nvim_buf_get_lines(vim.fn.bufnr('soba://context'), 0, 1, false)[1]
    assert.matches(vim.pesc(report.control.note) .. '$', first)
    vim.cmd('bwipeout! soba://context')
    running:close()
  end)

  it("takes the agent's model from its first response, and follows a switch", function()
    local workspace = tmp .. '/model_app'
    vim.fn.mkdir(workspace .. '/.git', 'p')
    workspace = vim.uv.fs_realpath(workspace)
    local agent = claude_session(workspace, 'c0ffee')
    agent.model = 'claude-opus-4-5'
    -- The editor is open before the agent's first response: no record names a model yet.
    agent.prompt_only('refactor the parser')
    -- Claude Code holds its transcript open while it runs: the session stays followed however
    -- long the steps below take.
    local running = assert(io.open(agent.file, 'r'))
    open_workspace('model_app')
    wait_for('the session attached before the first response', function()
      local r = soba.report()
      return r ~= nil and r.sessionId == 'claude-code-c0ffee'
    end, soba.BUDGET_RETRY_MS + WAIT_MS)
    assert.are_not.equal('claude-opus-4-5', soba.report().model, 'no record named the model yet')
    -- No limits before the model is known, and none of another model's.
    assert.matches(' · model not known yet$', soba.statusline())
    assert.are.equal('normal', format.severity(soba.report()))
    local early = table.concat(format.budget_lines(soba.report()), '\n')
    assert.matches('^Context budget: %S+ tokens, model not known yet\n', early)
    assert.matches("model not known yet: Claude Code's first response names it", early)
    assert.is_nil(early:find(soba.report().model, 1, true), early)

    agent.answer('Refactored.', 3000)
    statusline_shows('3k / 167k', 'where Claude Code compacts with Opus (200k − 20k − 13k)')
    assert.are.equal('claude-opus-4-5', soba.report().model)
    assert.are.equal(200000, soba.report().contextWindow)
    assert.are.equal(127808, soba.report().hardLimit, "SOBA's own hard limit is Opus's (200k − 64k − 8192)")
    assert.are.equal(
      "Claude Code compacts at ~167.0k (claude-opus-4-5); SOBA's hard limit 127.8k",
      format.budget_lines(soba.report())[2]
    )

    -- The user switches the agent to a model with a smaller output reserve.
    agent.model = 'claude-opus-4-1'
    agent.prompt('and the checker', 4000)
    -- The figure is the provider's 4k plus the growth allowance its reports teach (unseen context).
    wait_for("the new model's hard limit (200k − 32k − 8192)", function()
      local r = soba.report()
      return r.hardLimit == 159808 and r.effectiveTokens >= 4000
    end)
    assert.are.equal('claude-opus-4-1', soba.report().model)
    assert.matches(' / 167k$', soba.statusline())
    running:close()
  end)

  it("colours by the agent's own threshold and shows its own compaction as the last one", function()
    local workspace = tmp .. '/compacting_app'
    vim.fn.mkdir(workspace .. '/.git', 'p')
    workspace = vim.uv.fs_realpath(workspace)
    local agent = claude_session(workspace, 'c0d3c0')
    agent.prompt('read the whole codebase', 150000)
    local running = assert(io.open(agent.file, 'r'))
    open_workspace('compacting_app')
    local big = imported_budget(agent.file)
    assert.is_true(big.effectiveTokens > big.hardLimit, big.effectiveTokens .. ' / ' .. big.hardLimit)
    statusline_shows(text_of(big), "the budget against Claude Code's own threshold")
    -- Past SOBA's hard limit, under the agent's own threshold: healthy, no red.
    assert.are.equal('%#SobaBudgetOk#' .. text_of(big) .. '%*', soba.statusline_hl())
    assert.are.equal('Last compaction: none yet', format.budget_lines(soba.report())[#format.budget_lines(soba.report())])

    agent.compact(150000, 'The codebase is read.')
    agent.prompt('now fix the failing test', 21000)
    wait_for("Claude Code's own compaction as the last one", function()
      local lines = format.budget_lines(soba.report())
      return lines[#lines]:find("^Last compaction: Claude Code's own %(auto%): 150k → summary ") ~= nil
    end)
    vim.cmd('Soba capsule show')
    wait_for('the capsule buffer', function()
      return vim.fn.bufnr('soba://capsule') ~= -1
    end)
    local shown = vim.api.nvim_buf_get_lines(vim.fn.bufnr('soba://capsule'), 0, -1, false)
    assert.matches("^<!%-%- Claude Code's own compaction summary %(auto, ", shown[1])
    assert.is_truthy(table.concat(shown, '\n'):find('The codebase is read.', 1, true))
    vim.cmd('bwipeout! soba://capsule')
    running:close()
  end)

  it("shows a real Claude Code session's budget as its transcript grows", function()
    local fixture = vim.env.SOBA_NVIM_ROOT .. '/../../../shared/fixtures/transcripts/claude-code/agentcmd-session-four.jsonl'
    if vim.fn.filereadable(fixture) == 0 then
      assert.are_not.equal('true', vim.env.CI, fixture .. ' is missing; CI must provide ../shared/fixtures beside the checkout')
      print('SKIPPED: ../shared/fixtures missing (' .. fixture .. ' not found)')
      return
    end
    local lines = vim.fn.readfile(fixture)
    local half = math.floor(#lines / 2)
    local workspace = tmp .. '/real_app'
    vim.fn.mkdir(workspace .. '/.git', 'p')
    workspace = vim.uv.fs_realpath(workspace)
    local dir = tmp .. '/claude/projects/' .. claude_project_dir(workspace)
    vim.fn.mkdir(dir, 'p')
    local transcript = dir .. '/2d984148-cddb-4605-aac1-13e720fe613c.jsonl'
    vim.fn.writefile(vim.list_slice(lines, 1, half), transcript)
    open_workspace('real_app')

    local first = imported_budget(transcript)
    statusline_shows(text_of(first), "the first half's budget")
    vim.fn.writefile(vim.list_slice(lines, half + 1), transcript, 'a')
    local whole = imported_budget(transcript)
    assert.is_true(whole.effectiveTokens > first.effectiveTokens, first.effectiveTokens .. ' → ' .. whole.effectiveTokens)
    statusline_shows(text_of(whole), "the whole session's budget")
    assert.are.equal('provider_usage', soba.report().source)
  end)
end)
