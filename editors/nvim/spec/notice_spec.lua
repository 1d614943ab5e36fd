-- SOBA's own notices (a compaction's start and end, the daemon's warnings) in a real Neovim with
-- a terminal UI and a one-line command line: a compaction that fell back to the local capsule
-- because the model was slow must not leave the editor waiting at a hit-enter prompt.
local format = require('soba.format')

local root = vim.env.SOBA_NVIM_ROOT

--- A second Neovim in a pseudo-terminal (its screen is real: 80 columns, cmdheight 1), with the
--- plugin on its runtimepath; returns its RPC channel and job.
local function editor()
  local socket = vim.fn.tempname()
  local job = vim.fn.jobstart({
    vim.v.progpath,
    '--clean',
    '--listen',
    socket,
    '--cmd',
    'set rtp^=' .. root .. ' cmdheight=1 shortmess+=I',
  }, { pty = true, width = 80, height = 24, on_stdout = function() end, env = { TERM = 'xterm-256color' } })
  assert.is_true(job > 0, 'nvim started')
  assert.is_true(
    vim.wait(10000, function()
      return vim.uv.fs_stat(socket) ~= nil
    end, 20),
    'nvim listens'
  )
  local chan = vim.fn.sockconnect('pipe', socket, { rpc = true })
  -- It listens before it has read --cmd: wait for the end of its startup.
  assert.is_true(
    vim.wait(10000, function()
      return vim.rpcrequest(chan, 'nvim_get_vvar', 'vim_did_enter') == 1
    end, 20),
    'nvim finished starting'
  )
  return chan, job
end

--- Runs `code` in the editor as LSP handlers run (scheduled on its loop, one callback per
--- message) and returns its mode once it stopped at a prompt or 1.5 s passed. Only
--- nvim_get_mode answers while a prompt waits, so nothing else is asked meanwhile.
local function after(chan, code)
  vim.rpcrequest(chan, 'nvim_exec_lua', code, {})
  local mode
  vim.wait(1500, function()
    mode = vim.rpcrequest(chan, 'nvim_get_mode')
    return mode.blocking
  end, 50)
  return mode
end

local TIMEOUT_FALLBACK = [[
  local soba = require('soba')
  local result = {
    outcome = 'completed', trigger = 'hard_limit', fallback = true, quality = 'degraded',
    tokensBefore = 21000, tokensAfter = 8400, reclaimedPercent = 60, checkpointId = 'ck_5f3a9c2e7b1d',
    reason = 'the summarization model did not finish within 15000 ms; the local capsule was used',
  }
  vim.schedule(function()
    soba.handlers['soba/compaction'](nil, { phase = 'start', operationId = 'op1', sessionId = 's', trigger = 'hard_limit' })
  end)
  vim.schedule(function()
    soba.handlers['soba/compaction'](nil, { phase = 'end', operationId = 'op1', sessionId = 's', trigger = 'hard_limit',
      result = result, message = 'hard_limit compact: 21.0k → 8.4k tokens (−60%), ck_5f3a9c2e7b1d, degraded' })
  end)
  vim.schedule(function()
    soba.handlers['window/showMessage'](nil, { type = 2,
      message = 'The compaction used the local capsule: the summarization model did not finish within 15000 ms; the local capsule was used' })
  end)
]]

describe('notices', function()
  local chan, job
  before_each(function()
    chan, job = editor()
  end)
  after_each(function()
    vim.fn.jobstop(job)
  end)

  it('the same messages through plain vim.notify stop the editor at a hit-enter prompt', function()
    -- The check can fail: what SOBA's notices avoid does happen in this editor.
    local mode = after(
      chan,
      [[
      vim.schedule(function() vim.notify('SOBA: hard_limit compact: 21.0k → 8.4k tokens (−60%), ck_5f3a9c2e7b1d, degraded', vim.log.levels.WARN) end)
      vim.schedule(function() vim.notify('The compaction used the local capsule: summarization timed out after 15000 ms; the local capsule was used', vim.log.levels.WARN) end)
    ]]
    )
    assert.are.same({ mode = 'r', blocking = true }, mode)
  end)

  it('a timeout fallback is one line that says why, without a hit-enter prompt, and the warning does not replace it', function()
    local mode = after(chan, TIMEOUT_FALLBACK)
    assert.are.same({ mode = 'n', blocking = false }, mode)
    local messages = vim.rpcrequest(chan, 'nvim_exec2', 'messages', { output = true }).output
    local lines = vim.split(messages, '\n', { trimempty = true })
    -- The start and the result: the daemon's warning of the same fallback does not replace the result.
    assert.are.equal(2, #lines, messages)
    for _, line in ipairs(lines) do
      assert.is_true(vim.fn.strdisplaywidth(line) <= 80, line)
    end
    -- Why it fell back comes first, so the line fit to the command line shows it.
    assert.truthy(lines[2]:find('^SOBA: hard_limit compact, degraded %(model timed out%): 21k → 8.4k'), lines[2])
    -- Still responsive: a command runs at once.
    vim.rpcrequest(chan, 'nvim_command', 'let g:after_notice = 1')
    assert.are.equal(1, vim.rpcrequest(chan, 'nvim_get_var', 'after_notice'))
  end)

  it('a multi-line warning from the daemon is one line in a narrow window', function()
    vim.rpcrequest(chan, 'nvim_command', 'set columns=40')
    local mode = after(
      chan,
      [[vim.schedule(function() require('soba').handlers['window/showMessage'](nil, { type = 1,
        message = 'file changes in /a/very/long/workspace/path are not recorded:\ninotify watch limit reached' }) end)]]
    )
    assert.are.same({ mode = 'n', blocking = false }, mode)
    local shown = vim.rpcrequest(chan, 'nvim_exec2', 'messages', { output = true }).output
    assert.is_nil(shown:find('\n'), shown)
    assert.truthy(shown:find('…$'), shown)
  end)

  it('a notification plugin gets the whole text', function()
    local seen = vim.rpcrequest(
      chan,
      'nvim_exec_lua',
      [[
      local seen = {}
      vim.notify = function(msg, level, opts) seen[#seen + 1] = { msg = msg, level = level, title = opts.title } end
      require('soba').notice('the compaction used the local capsule\nsummarization timed out after 15000 ms', vim.log.levels.WARN)
      return seen
    ]],
      {}
    )
    assert.are.same({
      {
        msg = 'SOBA: the compaction used the local capsule; summarization timed out after 15000 ms',
        level = vim.log.levels.WARN,
        title = 'SOBA',
      },
    }, seen)
  end)
end)

describe('format for notices', function()
  it('fits text to the cells an echo has, marking the cut', function()
    assert.are.equal('short', format.fit('short', 10))
    assert.are.equal('abcdefghi…', format.fit('abcdefghijklmnop', 10))
    assert.are.equal('21.0k → …', format.fit('21.0k → 8.4k tokens', 9))
    assert.are.equal(9, vim.fn.strdisplaywidth(format.fit('21.0k → 8.4k tokens', 9)))
  end)

  it('puts line breaks on one line', function()
    assert.are.equal('a; b; c', format.one_line('a\nb\n\n  c'))
  end)
end)
