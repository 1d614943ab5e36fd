-- The statusline and notifications driven by the daemon's notifications, without a daemon:
-- the handlers are fed the messages the daemon sends.
local soba = require('soba')

-- The statusline shows the current buffer's workspace: the specs work in a real folder.
local workspace = vim.uv.fs_realpath(vim.fn.tempname()) or vim.fn.tempname()
vim.fn.mkdir(workspace .. '/.soba', 'p')
workspace = vim.uv.fs_realpath(workspace)
local other_workspace = vim.uv.fs_realpath(vim.fn.tempname()) or vim.fn.tempname()
vim.fn.mkdir(other_workspace .. '/.soba', 'p')
other_workspace = vim.uv.fs_realpath(other_workspace)

local function report(overrides)
  return vim.tbl_extend('force', {
    sessionId = 's_1',
    workspace = workspace,
    effectiveTokens = 31200,
    hardLimit = 48800,
    softLimit = 39040,
    source = 'estimated',
    contextWindow = 64000,
    maxOutputTokens = 8000,
    autoCompact = true,
    lastCompaction = vim.NIL,
    breakdown = { system = 0, tools = 0, capsule = 0, retainedTail = 0, newEntries = 31200 },
    model = 'test-model',
    tokenizer = 'o200k_base',
    compacting = false,
  }, overrides or {})
end

local budget_changed = soba.handlers['soba/budgetChanged']
local compaction = soba.handlers['soba/compaction']
local session_closed = soba.handlers['soba/session/closed']

describe('statusline from notifications', function()
  local messages, user_events, autocmd
  local original_notify = vim.notify

  before_each(function()
    vim.cmd.cd(workspace)
    vim.cmd.enew({ bang = true })
    messages, user_events = {}, 0
    vim.notify = function(msg, level)
      messages[#messages + 1] = { msg = msg, level = level }
    end
    autocmd = vim.api.nvim_create_autocmd('User', {
      pattern = 'SobaBudgetChanged',
      callback = function()
        user_events = user_events + 1
      end,
    })
  end)

  after_each(function()
    vim.notify = original_notify
    vim.api.nvim_del_autocmd(autocmd)
    for key in pairs(soba._state.reports) do
      soba._state.reports[key] = nil
    end
    soba._state.latest_workspace = nil
  end)

  it('goes blank when the shown session is closed, and only then', function()
    budget_changed(nil, report())
    session_closed(nil, { sessionId = 's_other', workspace = workspace })
    assert.are.equal('31.2k / 48.8k', soba.statusline())
    local events = user_events
    session_closed(nil, { sessionId = 's_1', workspace = workspace })
    assert.are.equal('', soba.statusline())
    assert.is_nil(soba.report())
    assert.are.equal(events + 1, user_events)
  end)

  it('shows the latest budget and fires User SobaBudgetChanged', function()
    assert.are.equal('', soba.statusline())
    assert.is_false(soba.lualine().cond())
    budget_changed(nil, report())
    assert.are.equal('31.2k / 48.8k', soba.statusline())
    assert.are.equal('%#SobaBudgetOk#31.2k / 48.8k%*', soba.statusline_hl())
    budget_changed(nil, report({ effectiveTokens = 48800 }))
    assert.are.equal('%#SobaBudgetError#48.8k / 48.8k%*', soba.statusline_hl())
    assert.are.equal('SobaBudgetError', soba.lualine().color())
    assert.are.equal(2, user_events)
  end)

  it('shows the current workspace\'s budget, never another workspace\'s', function()
    budget_changed(nil, report())
    budget_changed(nil, report({ sessionId = 's_other', workspace = other_workspace, effectiveTokens = 9000 }))
    assert.are.equal('31.2k / 48.8k', soba.statusline(), 'the latest report is another workspace\'s')
    vim.cmd.edit(vim.fn.fnameescape(other_workspace .. '/notes.md'))
    assert.are.equal('9k / 48.8k', soba.statusline())
    local empty = vim.fn.tempname()
    vim.fn.mkdir(empty, 'p')
    vim.cmd.cd(empty)
    vim.cmd.enew({ bang = true })
    assert.are.equal('', soba.statusline(), 'a workspace without a session shows nothing')
  end)

  it('escapes the percent sign for the statusline', function()
    budget_changed(nil, report())
    compaction(nil, { sessionId = 's_1', operationId = 'op_pct', trigger = 'user', phase = 'progress', percent = 82 })
    assert.are.equal('%#SobaBudgetOk#31.2k / 48.8k ⟳ 82%%%*', soba.statusline_hl())
    -- Rendered as a statusline, the highlight ends where it should and the text keeps its `%`.
    vim.o.laststatus = 2
    local rendered = vim.api.nvim_eval_statusline(soba.statusline_hl(), { highlights = true })
    assert.are.equal('31.2k / 48.8k ⟳ 82%', rendered.str)
    compaction(nil, { sessionId = 's_1', operationId = 'op_pct', trigger = 'user', phase = 'end', message = 'done' })
  end)

  it('shows a capsule creation as no compaction: the create command reports it', function()
    budget_changed(nil, report())
    local event = { sessionId = 's_1', operationId = 'op_h', trigger = 'handoff' }
    compaction(nil, vim.tbl_extend('force', event, { phase = 'start' }))
    compaction(nil, vim.tbl_extend('force', event, {
      phase = 'end',
      message = 'capsule created: ck_1 (local); the context is unchanged at 31.2k tokens',
      result = { fallback = false, outcome = 'completed', trigger = 'handoff', quality = 'local' },
    }))
    assert.are.same({}, messages, 'no "compacting context" and no compaction line')
    assert.are.equal('31.2k / 48.8k', soba.statusline())
  end)

  it('shows compaction progress, then the completion line once', function()
    budget_changed(nil, report())
    local event = { sessionId = 's_1', operationId = 'op_9', trigger = 'auto_threshold' }
    compaction(nil, vim.tbl_extend('force', event, { phase = 'start' }))
    assert.are.equal('SOBA: compacting context (auto_threshold)…', messages[1].msg)
    assert.are.equal('31.2k / 48.8k ⟳ 0%', soba.statusline())
    compaction(nil, vim.tbl_extend('force', event, { phase = 'progress', percent = 82 }))
    assert.are.equal('31.2k / 48.8k ⟳ 82%', soba.statusline())
    compaction(nil, vim.tbl_extend('force', event, { phase = 'progress', percent = vim.NIL }))
    assert.are.equal('31.2k / 48.8k ⟳ 82%', soba.statusline())
    compaction(nil, vim.tbl_extend('force', event, {
      phase = 'end',
      message = 'the daemon line',
      result = {
        fallback = false,
        outcome = 'completed',
        trigger = 'auto_threshold',
        tokensBefore = 41200,
        tokensAfter = 18300,
        reclaimedPercent = 55.6,
        checkpointId = 'ck_1',
        quality = 'model',
      },
    }))
    assert.are.equal('SOBA: auto_threshold compact: 41.2k → 18.3k tokens (−56%), model, ck_1', messages[2].msg)
    assert.are.equal(vim.log.levels.INFO, messages[2].level)
    assert.is_false(soba.claim('op_9'), 'the end notification showed the result')
    assert.are.equal('31.2k / 48.8k', soba.statusline())
  end)

  it('shows the result once when the command showed it before the end notification', function()
    assert.is_true(soba.claim('op_11'))
    compaction(nil, { sessionId = 's_1', operationId = 'op_11', trigger = 'user', phase = 'end', message = 'user compact: done' })
    assert.are.same({}, messages)
  end)

  it('warns when the capsule is a degraded fallback', function()
    compaction(nil, {
      sessionId = 's_1',
      operationId = 'op_10',
      trigger = 'hard_limit',
      phase = 'end',
      result = {
        outcome = 'completed',
        reason = 'the summarization model did not finish within 15000 ms; the local capsule was used',
        trigger = 'hard_limit',
        tokensBefore = 50000,
        tokensAfter = 20000,
        reclaimedPercent = 60,
        checkpointId = 'ck_2',
        quality = 'degraded',
        fallback = true,
      },
    })
    assert.are.same(
      {
        msg = 'SOBA: hard_limit compact, degraded (model timed out): 50k → 20k tokens (−60%), ck_2',
        level = vim.log.levels.WARN,
      },
      messages[1]
    )
    -- The daemon's warning of the same fallback does not replace the line; another warning shows.
    local show = soba.handlers['window/showMessage']
    show(nil, { type = 2, message = 'The compaction used the local capsule: the summarization model did not finish within 15000 ms; the local capsule was used' })
    assert.are.equal(1, #messages)
    show(nil, { type = 2, message = 'file changes in /w are not recorded: too many files' })
    assert.are.equal('SOBA: file changes in /w are not recorded: too many files', messages[2].msg)
  end)
end)
