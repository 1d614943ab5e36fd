-- Attaches Neovim's LSP client to the real daemon (`soba serve --standalone`, from $SOBA_BIN),
-- runs every :Soba command and checks the statusline before and after appends and a compaction.
local soba = require('soba')
local format = require('soba.format')
local commands = require('soba.commands')

local WAIT_MS = 15000
local HARD_LIMIT = 7000 -- contextWindow 8000 − maxOutputTokens 1000 − safetyReserveTokens 0
local SOFT_LIMIT = 5600 -- floor(7000 × 0.8)

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

local function message(role, text)
  return { type = 'message', role = role, content = { { type = 'text', text = text } } }
end

local tmp = vim.fn.tempname()
local workspace
local messages = {}
local original_notify = vim.notify

local daemon_exit

local function lsp_log_tail()
  local file = io.open(vim.lsp.log.get_filename(), 'r')
  if not file then
    return '(no LSP log)'
  end
  local text = file:read('*a')
  file:close()
  return text:sub(-3000)
end

--- Waits until `predicate()` holds; fails at once, with the daemon's log, when the daemon exits.
local function wait_for(what, predicate)
  local ok = vim.wait(WAIT_MS, function()
    return daemon_exit ~= nil or predicate()
  end, 20)
  if not ok or daemon_exit ~= nil then
    error(
      string.format(
        'timed out waiting for %s%s\nnotifications: %s\nstatusline: %q\nLSP log tail:\n%s',
        what,
        daemon_exit and (' (the daemon exited with ' .. daemon_exit .. ')') or '',
        vim.inspect(messages),
        soba.statusline(),
        lsp_log_tail()
      ),
      2
    )
  end
end

--- Waits for a notification matching `pattern` after index `from`; returns it. An error
--- notification that does not match fails at once with its text.
local function notified(pattern, from)
  local found, failure
  wait_for('a notification matching ' .. pattern, function()
    for i = (from or 0) + 1, #messages do
      if messages[i].msg:find(pattern) then
        found = messages[i]
        return true
      elseif messages[i].level == vim.log.levels.ERROR then
        failure = messages[i].msg
        return true
      end
    end
    return false
  end)
  if failure then
    error(string.format('expected a notification matching %s, got the error: %s', pattern, failure), 2)
  end
  return found
end

local function request(method, params)
  local response = soba.client():request_sync(method, params, WAIT_MS)
  assert.is_not_nil(response, method .. ' timed out')
  assert.is_nil(response.err, method .. ': ' .. vim.inspect(response.err))
  return response.result
end

describe('against the real daemon', function()
  local bin = vim.env.SOBA_BIN
  local session_id

  setup(function()
    assert.is_truthy(bin and vim.fn.executable(bin) == 1, 'set SOBA_BIN to the soba binary (scripts/test does)')
    workspace = tmp .. '/workspace'
    vim.fn.mkdir(workspace .. '/.soba', 'p')
    workspace = vim.uv.fs_realpath(workspace)
    vim.fn.writefile(
      { vim.json.encode({ compaction = { keepRecentTokens = 600, safetyReserveTokens = 0, minTokensForAutoCompact = 1000 } }) },
      workspace .. '/.soba/config.json'
    )
    for _, dir in ipairs({ 'data', 'runtime', 'config', 'xdg-data' }) do
      vim.fn.mkdir(tmp .. '/' .. dir, 'p')
    end
    vim.fn.writefile({ vim.json.encode({ trustedWorkspaces = { workspace } }) }, tmp .. '/user-config.json')
    vim.notify = function(msg, level)
      messages[#messages + 1] = { msg = msg, level = level }
    end

    require('soba').setup({
      cmd = { bin, 'serve', '--standalone' },
      lsp = {
        cmd_env = {
          SOBA_DATA_DIR = tmp .. '/data',
          SOBA_RUNTIME_DIR = tmp .. '/runtime',
          -- Trusts the workspace: a session's own summarizer endpoint applies (:Soba cancel).
          SOBA_CONFIG = tmp .. '/user-config.json',
          XDG_CONFIG_HOME = tmp .. '/config',
          XDG_DATA_HOME = tmp .. '/xdg-data',
        },
        on_exit = function(code)
          daemon_exit = code
        end,
      },
    })
    vim.cmd.edit(vim.fn.fnameescape(workspace .. '/notes.md'))
    wait_for('the soba client to attach', function()
      local client = soba.client()
      return client ~= nil and client.initialized == true
    end)
  end)

  teardown(function()
    local clients = vim.lsp.get_clients({ name = 'soba' })
    for _, client in ipairs(clients) do
      client:stop()
    end
    vim.wait(5000, function()
      return #vim.lsp.get_clients({ name = 'soba' }) == 0
    end)
    vim.notify = original_notify
    vim.fn.delete(tmp, 'rf')
  end)

  it('attaches with the workspace as root and shows an opened session in the statusline', function()
    assert.are.equal(1, #vim.lsp.get_clients({ name = 'soba' }))
    assert.are.equal(workspace, soba.workspace())
    local opened = request('soba/session/open', {
      workspace = workspace,
      create = true,
      model = { contextWindow = 8000, maxOutputTokens = 1000 },
    })
    session_id = opened.sessionId
    assert.are.equal(HARD_LIMIT, opened.budget.hardLimit)
    assert.are.equal(SOFT_LIMIT, opened.budget.softLimit)

    local before = #messages
    vim.cmd('Soba budget')
    notified('Context budget:', before)
    local report = soba.report()
    assert.are.equal(session_id, report.sessionId)
    assert.is_true(report.effectiveTokens < 1000)
    assert.are.equal(format.tokens(report.effectiveTokens) .. ' / 7k', soba.statusline())
    assert.are.equal('%#SobaBudgetOk#' .. soba.statusline() .. '%*', soba.statusline_hl())
  end)

  it('refreshes the statusline from soba/budgetChanged after appends', function()
    local before_text = soba.statusline()
    local appended = request('soba/session/append', {
      sessionId = session_id,
      entries = { message('user', prose(1, 600)), message('assistant', prose(2, 600)) },
    })
    local expected = format.tokens(appended.budget.effectiveTokens) .. ' / 7k'
    wait_for('the statusline to show ' .. expected, function()
      return soba.statusline() == expected
    end)
    assert.are_not.equal(before_text, soba.statusline())
    assert.are.equal('normal', format.severity(soba.report()))
  end)

  it('turns the lualine component to the warning colour past the soft limit', function()
    local effective = soba.report().effectiveTokens
    local i = 3
    while effective <= SOFT_LIMIT do
      assert.is_true(i < 60, 'appends never got past the soft limit')
      local appended = request('soba/session/append', {
        sessionId = session_id,
        entries = { message(i % 2 == 1 and 'user' or 'assistant', prose(i, 250)) },
      })
      effective = appended.budget.effectiveTokens
      i = i + 1
    end
    assert.is_true(effective < HARD_LIMIT, 'one small append jumped past the hard limit')
    local expected = format.tokens(effective) .. ' / 7k'
    wait_for('the statusline to show ' .. expected, function()
      return soba.statusline() == expected
    end)
    local component = soba.lualine()
    assert.are.equal(expected, component[1]())
    assert.is_true(component.cond())
    assert.are.equal('SobaBudgetWarning', component.color())
  end)

  it(':Soba auto-compact off and on', function()
    local before = #messages
    vim.cmd('Soba auto-compact off')
    notified('auto%-compact is off', before)
    wait_for('a budget with auto-compact off', function()
      return soba.report().autoCompact == false
    end)
    vim.cmd('Soba auto-compact on')
    notified('auto%-compact is on', before)
    wait_for('a budget with auto-compact on', function()
      return soba.report().autoCompact == true
    end)
    vim.cmd('Soba auto-compact off')
    notified('auto%-compact is off', before + 2)
  end)

  it(':Soba compact shows progress, the completion line and a smaller budget', function()
    local before_tokens = soba.report().effectiveTokens
    local before = #messages
    vim.cmd('Soba compact keep the parser decisions')
    local started = notified('compacting context %(', before)
    local trigger = started.msg:match('compacting context %((%w+)%)')
    local done = notified(trigger .. ' compact: ', before)
    local checkpoint = done.msg:match('(ck_[%w_%-]+)')
    assert.is_not_nil(checkpoint, done.msg)
    wait_for('a budget naming the new checkpoint', function()
      local last = soba.report().lastCompaction
      return last ~= nil and last ~= vim.NIL and last.checkpointId == checkpoint
    end)
    local report = soba.report()
    assert.is_true(report.effectiveTokens < before_tokens, before_tokens .. ' → ' .. report.effectiveTokens)
    assert.are.equal(format.tokens(report.effectiveTokens) .. ' / 7k', soba.statusline())
    assert.are.equal('normal', format.severity(report))
    -- The completion line is shown once, whether the response or the end notification came first.
    vim.wait(300, function()
      return false
    end)
    local count = 0
    for i = before + 1, #messages do
      if messages[i].msg:find(trigger .. ' compact: ', 1, true) then
        count = count + 1
      end
    end
    assert.are.equal(1, count)
  end)

  it(':Soba capsule create, list, export (typed and picked) and load', function()
    local before = #messages
    vim.cmd('Soba capsule create Parser hand-off')
    local created = notified('capsule "Parser hand%-off" created: ', before)
    local checkpoint = created.msg:match('created: (ck_[%w_%-]+)')
    assert.is_not_nil(checkpoint, created.msg)

    vim.cmd('Soba capsule list')
    notified(vim.pesc(checkpoint) .. '  Parser hand%-off', before)

    local typed = tmp .. '/typed.capsule.md'
    vim.cmd('Soba capsule export ' .. checkpoint .. ' ' .. typed)
    notified('exported to ' .. vim.pesc(typed), before)
    assert.is_true(vim.fn.getfsize(typed) > 0)

    local original_select, original_input = vim.ui.select, vim.ui.input
    local offered, default_path
    vim.ui.select = function(items, _, on_choice)
      offered = items
      on_choice(items[1])
    end
    local picked = tmp .. '/picked.capsule.md'
    vim.ui.input = function(opts, on_confirm)
      default_path = opts.default
      on_confirm(picked)
    end
    vim.cmd('Soba capsule export')
    notified('exported to ' .. vim.pesc(picked), before)
    vim.ui.select, vim.ui.input = original_select, original_input
    assert.are.equal(checkpoint, offered[1].checkpointId, 'the newest checkpoint is offered first')
    assert.are.equal('parser-hand-off.capsule.md', default_path)

    assert.are.same(checkpoint, commands.complete('', 'Soba capsule export ')[1], 'checkpoint ids complete, newest first')
    assert.are.same({ checkpoint }, commands.complete(checkpoint:sub(1, 6), 'Soba capsule export ' .. checkpoint:sub(1, 6)))

    -- A load replaces a live context: it asks first, and a "no" loads nothing.
    local original_confirm = commands.confirm
    local questions = {}
    commands.confirm = function(question)
      questions[#questions + 1] = question
      return false
    end
    local tokens_before = soba.report().effectiveTokens
    vim.cmd('Soba capsule load ' .. typed)
    notified('capsule not loaded', before)
    assert.matches('^Replace the live context %(' .. vim.pesc(format.tokens(tokens_before)) .. ' tokens, session ', questions[1])
    assert.are.equal(tokens_before, request('soba/budget', { workspace = workspace }).effectiveTokens)

    commands.confirm = function()
      return true
    end
    vim.cmd('Soba capsule load ' .. typed)
    local loaded = notified('capsule loaded into session ', before)
    commands.confirm = original_confirm
    assert.matches('session ' .. vim.pesc(session_id) .. ' as ck_', loaded.msg)
  end)

  it(':Soba rewind goes back to a picked checkpoint after confirming', function()
    local before = #messages
    local capsules = request('soba/capsule/list', { workspace = workspace }).capsules
    local oldest = capsules[1]
    local original_select, original_confirm = vim.ui.select, commands.confirm
    local offered
    vim.ui.select = function(items, _, on_choice)
      offered = items
      on_choice(items[#items])
    end
    commands.confirm = function()
      return true
    end
    vim.cmd('Soba rewind')
    local rewound = notified('rewound to ' .. vim.pesc(oldest.checkpointId), before)
    vim.ui.select, commands.confirm = original_select, original_confirm
    assert.are.equal(#capsules, #offered)
    assert.are.equal(capsules[#capsules].checkpointId, offered[1].checkpointId, 'newest first')
    assert.matches('/ 7k$', rewound.msg)
    assert.are.equal(format.tokens(oldest.tokens.after), format.tokens(soba.report().effectiveTokens))
  end)

  it(':Soba context shows what fills the window, and :Soba capsule show the capsule in force', function()
    vim.cmd('Soba context')
    wait_for('the soba://context buffer', function()
      return vim.fn.bufnr('soba://context') ~= -1
    end)
    local text = table.concat(vim.api.nvim_buf_get_lines(vim.fn.bufnr('soba://context'), 0, -1, false), '\n')
    assert.matches('^Context of session ' .. vim.pesc(session_id) .. ': ', text)
    assert.matches('By part\n  System prompt', text)
    assert.matches('File reads', text)
    assert.matches('Largest entries\n +[%d.]+k? +%a', text)
    assert.matches('Capsule in force: ck_', text)
    vim.cmd('Soba capsule show')
    wait_for('the soba://capsule buffer', function()
      return vim.fn.bufnr('soba://capsule') ~= -1
    end)
    local capsule = vim.api.nvim_buf_get_lines(vim.fn.bufnr('soba://capsule'), 0, -1, false)
    assert.is_true(#capsule > 1, vim.inspect(capsule))
    vim.cmd('bwipeout! soba://capsule')
    vim.cmd('bwipeout! soba://context')
  end)

  it(':Soba flight opens the flight records', function()
    vim.cmd('Soba flight')
    wait_for('the soba://flight buffer', function()
      return vim.fn.bufnr('soba://flight') ~= -1
    end)
    local lines = vim.api.nvim_buf_get_lines(vim.fn.bufnr('soba://flight'), 0, -1, false)
    assert.matches('completed %w+ ', table.concat(lines, '\n'))
  end)

  it(':checkhealth soba finds the binary, the daemon and a valid config', function()
    vim.cmd('checkhealth soba')
    local text = table.concat(vim.api.nvim_buf_get_lines(0, 0, -1, false), '\n')
    assert.matches('version: soba ', text)
    assert.matches('daemon reachable: session ' .. vim.pesc(session_id), text)
    assert.matches('config.json is valid', text)
    vim.cmd('bwipeout!')
  end)

  it('blanks the statusline when the agent closes its session', function()
    assert.are.equal(session_id, soba.report().sessionId)
    local closed = request('soba/session/close', { sessionId = session_id })
    assert.are.equal(session_id, closed.sessionId)
    wait_for('the statusline to say no agent session', function()
      return soba.statusline() == soba.IDLE_TEXT
    end)
    assert.are.same({}, request('soba/sessions', { workspace = workspace }).sessions)
  end)

  it(':Soba cancel stops a compaction mid-model-call, and says when none runs', function()
    -- A summarization model that reads each request and never replies.
    local server = assert(vim.uv.new_tcp())
    assert(server:bind('127.0.0.1', 0))
    local asked, sockets = 0, {}
    assert(server:listen(16, function()
      local socket = assert(vim.uv.new_tcp())
      server:accept(socket)
      sockets[#sockets + 1] = socket
      socket:read_start(function(_, data)
        if data then
          asked = asked + 1
        end
      end)
    end))
    local base_url = string.format('http://127.0.0.1:%d/v1', server:getsockname().port)
    local opened = request('soba/session/open', {
      workspace = workspace,
      create = true,
      model = { contextWindow = 8000, maxOutputTokens = 1000 },
      -- Long enough that only the cancel ends the model call.
      compaction = { timeoutMs = 60000 },
      summarizer = { provider = 'openai', baseUrl = base_url, model = 'never-answers' },
    })
    local id = opened.sessionId
    request('soba/session/append', {
      sessionId = id,
      entries = { message('user', prose(11, 1200)), message('assistant', prose(12, 1200)), message('user', prose(13, 900)) },
    })
    wait_for('the statusline to show the new session', function()
      local report = soba.report()
      return report ~= nil and report.sessionId == id
    end)

    local before = #messages
    vim.cmd('Soba compact')
    wait_for('the summarization model to be asked', function()
      return asked > 0
    end)
    vim.cmd('Soba cancel')
    notified('cancelled the compaction of session ' .. vim.pesc(id) .. ': no capsule is written', before)
    notified('user compact cancelled: no capsule written; the context is unchanged', before)
    assert.are.same({}, request('soba/capsule/list', { sessionId = id }).capsules)
    wait_for('the statusline to stop showing the compaction', function()
      return not soba.statusline():find('⟳', 1, true)
    end)

    local after = #messages
    vim.cmd('Soba cancel')
    notified('no compaction running in session ' .. vim.pesc(id) .. ': nothing to cancel', after)

    request('soba/session/close', { sessionId = id })
    for _, socket in ipairs(sockets) do
      socket:close()
    end
    server:close()
  end)
end)
