local format = require('soba.format')

local function report(overrides)
  return vim.tbl_extend('force', {
    sessionId = 's_1',
    workspace = '/work/project',
    effectiveTokens = 31200,
    hardLimit = 48800,
    softLimit = 39040,
    source = 'estimated',
    contextWindow = 64000,
    maxOutputTokens = 8000,
    autoCompact = true,
    lastCompaction = vim.NIL,
    breakdown = { system = 1200, tools = 2000, capsule = 0, retainedTail = 0, newEntries = 28000 },
    model = 'test-model',
    tokenizer = 'o200k_base',
    compacting = false,
  }, overrides or {})
end

describe('format', function()
  it('keeps small counts exact and abbreviates thousands and millions', function()
    assert.are.equal('0', format.tokens(0))
    assert.are.equal('950', format.tokens(950))
    assert.are.equal('1.2k', format.tokens(1234))
    assert.are.equal('48.8k', format.tokens(48800))
    assert.are.equal('128k', format.tokens(128000))
    assert.are.equal('1M', format.tokens(999960))
    assert.are.equal('1.3M', format.tokens(1250000))
    assert.are.equal('0', format.tokens(-5))
  end)

  it('shows effective tokens against the hard limit, with progress while compacting', function()
    assert.are.equal('31.2k / 48.8k', format.statusline(report()))
    assert.are.equal('31.2k / 48.8k ⟳ 82%', format.statusline(report(), 82))
    assert.are.equal('31.2k / 48.8k ⟳', format.statusline(report({ compacting = true })))
  end)

  it('shows a queued compact as pending until the agent\'s model call ends', function()
    assert.are.equal('31.2k / 48.8k ⏳', format.statusline(report({ compactQueued = true })))
  end)

  it('is normal up to the soft limit, warning past it, error at the hard limit', function()
    assert.are.equal('normal', format.severity(report({ effectiveTokens = 39040 })))
    assert.are.equal('warning', format.severity(report({ effectiveTokens = 39041 })))
    assert.are.equal('error', format.severity(report({ effectiveTokens = 48800 })))
    assert.are.equal('SobaBudgetWarning', format.highlight.warning)
  end)

  it('describes the budget like the VS Code tooltip', function()
    assert.are.same({
      'Context budget: 31.2k / 48.8k tokens (64% of the hard limit)',
      'Soft limit: 39k (auto-compaction starts past it)',
      'Measured: estimated (test-model, o200k_base)',
      "Estimated: no usage report from the provider since the latest capsule, so SOBA counted the context with o200k_base, the model's own tokenizer",
      'Breakdown: system 1.2k, tools 2k, capsule 0, retained tail 0, new entries 28k',
      'Auto-compact: on',
      'Last compaction: none yet',
    }, format.budget_lines(report()))
    local last = {
      checkpointId = 'ck_3f9a',
      trigger = 'auto_threshold',
      quality = 'model',
      tokensBefore = 41200,
      tokensAfter = 18300,
      ts = '2026-11-29T12:05:00Z',
    }
    assert.are.equal(
      'auto_threshold: 41.2k → 18.3k (−56%), ck_3f9a, model, 2026-11-29T12:05:00Z',
      format.last_compaction(last)
    )
  end)

  it('says where the allowance for what the log never holds comes from', function()
    local r = report({
      breakdown = {
        system = 0,
        tools = 0,
        capsule = 0,
        retainedTail = 0,
        newEntries = 28000,
        notInLog = 40500,
        unseenText = 'not in the log: ~40.5k, default for Claude Code',
      },
    })
    local lines = format.budget_lines(r)
    assert.are.equal('Allowance: not in the log: ~40.5k, default for Claude Code', lines[6])
    assert.are.equal('Auto-compact: on', lines[7])
  end)

  it('says who compacts a followed agent instead of promising SOBA compacts it', function()
    local note = "Claude Code compacts this session itself; SOBA follows it."
    local followed = report({ control = { compactedBy = 'agent', agent = 'claude-code', note = note, actions = 'preview' } })
    assert.is_true(format.followed(followed))
    local lines = format.budget_lines(followed)
    assert.are.equal('Soft limit: 39k', lines[2])
    assert.are.equal(note, lines[6])
    for _, line in ipairs(lines) do
      assert.is_nil(line:find('Auto%-compact'), line)
    end
    local driven = report({ control = { compactedBy = 'soba', note = 'SOBA compacts', actions = '' } })
    assert.is_false(format.followed(driven))
    assert.is_false(format.followed(report()))
    assert.is_false(format.followed(nil))
    assert.are.equal('Auto-compact: on', format.budget_lines(driven)[6])
  end)

  it("shows a followed agent as it sees itself: its threshold, SOBA's hard limit as SOBA's, its own compaction", function()
    local control = { compactedBy = 'agent', agent = 'claude-code', note = 'Claude Code compacts this session itself; SOBA follows it.' }
    local early = report({
      effectiveTokens = 30,
      hardLimit = 103400,
      model = 'gpt-4o',
      control = control,
      followed = {
        modelSource = 'unknown',
        compactsAtBasis = "Claude Code's threshold depends on its model",
        text = "model not known yet: Claude Code's first response names it; no limits are shown until then",
      },
    })
    assert.are.equal('30 · model not known yet', format.status_text(early))
    assert.are.equal('normal', format.severity(early))
    local lines = table.concat(format.budget_lines(early), '\n')
    assert.is_nil(lines:find('gpt-4o', 1, true), lines)
    assert.is_nil(lines:find('103.4k', 1, true), lines)

    local known = report({
      effectiveTokens = 150000,
      hardLimit = 127800,
      model = 'claude-sonnet-4-5',
      control = control,
      followed = {
        model = 'claude-sonnet-4-5',
        modelSource = 'transcript',
        compactsAt = 167000,
        compactsAtBasis = 'Claude Code auto-compacts 13.0k below its usable window',
        text = "Claude Code compacts at ~167.0k (claude-sonnet-4-5); SOBA's hard limit 127.8k",
        lastCompaction = { entryId = 'e_cb', ts = '2026-12-01T10:05:00Z', trigger = 'auto', tokensBefore = 150000, summaryTokens = 2200 },
      },
    })
    assert.are.equal('150k / 167k', format.status_text(known))
    assert.are.equal('normal', format.severity(known), "past SOBA's hard limit, under the agent's own threshold")
    assert.are.equal('warning', format.severity(vim.tbl_extend('force', known, { effectiveTokens = 167000 })))
    local budget = format.budget_lines(known)
    assert.are.equal('Context budget: 150k / 167k tokens (90% of where Claude Code compacts)', budget[1])
    assert.are.equal("Claude Code compacts at ~167.0k (claude-sonnet-4-5); SOBA's hard limit 127.8k", budget[2])
    assert.are.equal("Last compaction: Claude Code's own (auto): 150k → summary 2.2k, 2026-12-01T10:05:00Z", budget[#budget])
  end)

  it("shows a followed agent's own summary as the capsule in force, and counts what is not in the log by kind", function()
    local ctx = {
      sessionId = 's_1',
      effectiveTokens = 62228,
      hardLimit = 127800,
      softLimit = 102200,
      source = 'provider_usage',
      control = { compactedBy = 'agent', agent = 'claude-code', note = 'Claude Code compacts this session itself; SOBA follows it.' },
      breakdown = { system = 0, tools = 0, capsule = 2200, retainedTail = 0, newEntries = 5756 },
      byKind = { system = 0, toolSchemas = 0, capsule = 2200, userMessages = 1000, assistantMessages = 1756, fileReads = 2000, toolOutputs = 1000 },
      largest = {},
      capsule = vim.NIL,
      agentSummary = { entryId = 'e_cb', agent = 'claude-code', trigger = 'auto', ts = 't', tokens = 2200, text = 'The parser is done.' },
    }
    local lines = format.context_lines(ctx)
    local text = table.concat(lines, '\n')
    local by_kind = text:match('By kind\n(.-)\n\nLargest')
    assert.is_truthy(by_kind and by_kind:find('Not in the log', 1, true), text)
    assert.are.equal("Capsule in force: Claude Code's own compaction summary (auto, e_cb, 2.2k tokens): :Soba capsule show", lines[#lines])
  end)

  it('lists a checkpoint by title or by what made it, never as nil', function()
    local c = {
      checkpointId = 'ck_1',
      title = vim.NIL,
      trigger = 'auto_threshold',
      quality = 'degraded',
      origin = 'session',
      tokens = { before = 41200, after = 2200, capsule = 1500 },
    }
    -- The capsule's own size, as its creation's notice and `:Soba capsule list` give it.
    assert.are.equal('compaction (auto threshold)  ck_1 · degraded · 1.5k tokens', format.checkpoint_item(c))
    c.title = nil
    assert.is_nil(format.checkpoint_item(c):find('nil'))
    c.trigger, c.title = 'handoff', 'Parser hand-off'
    assert.are.equal('Parser hand-off  ck_1 · degraded · 1.5k tokens', format.checkpoint_item(c))
    c.title, c.origin = '', 'loaded'
    assert.matches('^loaded capsule  ck_1', format.checkpoint_item(c))
    c.origin, c.trigger = 'session', 'user'
    assert.matches('^compaction %(/compact%)  ck_1', format.checkpoint_item(c))
  end)

  it('explains an estimate, and adds the rest of the total as a part so the parts sum to it', function()
    local followed = report({
      source = 'provider_usage',
      effectiveTokens = 136500,
      breakdown = { system = 0, tools = 0, capsule = 2200, retainedTail = 0, newEntries = 101500, notInLog = 32800 },
    })
    local lines = format.budget_lines(followed)
    assert.are.equal(
      'Breakdown: system 0, tools 0, capsule 2.2k, retained tail 0, new entries 101.5k, not in the log 32.8k',
      lines[5]
    )
    assert.matches('^Provider usage: ', lines[4])
    local scaled = report({
      effectiveTokens = 38640,
      calibration = { tokenizer = 'o200k_base', factor = 1.38, source = 'provisional' },
    })
    local label, rest = format.uncounted_part(scaled.effectiveTokens, scaled.breakdown, scaled.source)
    assert.are.same({ 'tokenizer scale', 7440 }, { label, rest })
    assert.are.equal(
      "Estimated: no usage report from the provider since the latest capsule, so SOBA counted the context with o200k_base, not the model's own tokenizer (scaled × 1.38)",
      format.source_explanation(scaled)
    )
  end)

  it("shows an estimate's unseen-context allowance once, beside the tokenizer scale", function()
    local r = report({
      effectiveTokens = 76380,
      calibration = { tokenizer = 'o200k_base', factor = 1.15, source = 'catalog' },
      breakdown = {
        system = 1200,
        tools = 2000,
        capsule = 0,
        retainedTail = 0,
        newEntries = 28000,
        notInLog = 40500,
        unseen = { tokens = 40500, kind = 'context', source = 'default' },
        unseenText = 'not in the log: ~40.5k, default for Claude Code',
      },
    })
    local lines = format.budget_lines(r)
    assert.are.equal(
      'Breakdown: system 1.2k, tools 2k, capsule 0, retained tail 0, new entries 28k, not in the log 40.5k, tokenizer scale 4.7k',
      lines[5]
    )
    assert.are.equal('Allowance: not in the log: ~40.5k, default for Claude Code', lines[6])
    local label, rest = format.uncounted_part(r.effectiveTokens, r.breakdown, r.source)
    assert.are.same({ 'tokenizer scale', 4680 }, { label, rest })
  end)

  it('names the count factor and where it comes from', function()
    local learned = report({ calibration = { tokenizer = 'o200k_base', factor = 1.234, source = 'session' } })
    assert.are.equal(
      'Measured: estimated (test-model, o200k_base × 1.23, learned from this session)',
      format.budget_lines(learned)[3]
    )
    local catalog = report({ calibration = { tokenizer = 'o200k_base', factor = 1.15, source = 'catalog' } })
    assert.are.equal('o200k_base × 1.15, catalog factor', format.counted_with(catalog))
    local provisional = report({ calibration = { tokenizer = 'o200k_base', factor = 1.38, source = 'provisional' } })
    assert.are.equal(
      'o200k_base × 1.38, catalog factor + margin until a usage report teaches one',
      format.counted_with(provisional)
    )
    local exact = report({ calibration = { tokenizer = 'o200k_base', factor = 1, source = 'exact' } })
    assert.are.equal('o200k_base', format.counted_with(exact))
  end)

  it('writes completion lines for every outcome', function()
    local result = {
      operationId = 'op_1',
      outcome = 'completed',
      reason = 'compacted',
      trigger = 'manual',
      tokensBefore = 41200,
      tokensAfter = 18300,
      reclaimedPercent = 55.6,
      checkpointId = 'ck_3f9a',
      quality = 'model',
      fallback = false,
    }
    assert.are.equal('manual compact: 41.2k → 18.3k tokens (−56%), model, ck_3f9a', format.completion_line(result))
    local degraded = vim.tbl_extend('force', result, {
      fallback = true,
      quality = 'degraded',
      reason = 'the summarization model did not finish within 30000 ms; the local capsule was used',
    })
    assert.are.equal(
      'manual compact, degraded (model timed out): 41.2k → 18.3k tokens (−56%), ck_3f9a',
      format.completion_line(degraded)
    )
    result.outcome, result.reason = 'skipped', 'nothing before the retained tail'
    assert.are.equal('manual compact skipped: nothing before the retained tail', format.completion_line(result))
    result.outcome, result.reason = 'cancelled', 'cancelled by a client'
    assert.are.equal('manual compact cancelled: no capsule written; the context is unchanged', format.completion_line(result))
    local created = vim.tbl_extend('force', result, { outcome = 'completed', trigger = 'handoff', quality = 'local', tokensBefore = 117600 })
    assert.are.equal(
      'capsule created: ck_3f9a (local); the context is unchanged at 117.6k tokens',
      format.completion_line(created)
    )
  end)

  it('names each way the summarization model fails in a few words', function()
    local used = '; the local capsule was used'
    assert.are.equal('model timed out', format.fallback_why('the summarization model did not finish within 30000 ms' .. used))
    assert.are.equal('model answered HTTP 503', format.fallback_why('the summarization model answered HTTP 503: overloaded' .. used))
    assert.are.equal('model unreachable', format.fallback_why('could not talk to the summarization model: refused' .. used))
    assert.are.equal(
      'model reply cut off',
      format.fallback_why("the summarization model's stream ended before the reply was complete" .. used)
    )
    assert.are.equal('invalid model reply', format.fallback_why('invalid reply from the summarization model: no JSON' .. used))
    assert.are.equal('model reported an error', format.fallback_why('the summarization model reported an error: quota' .. used))
    assert.are.equal(
      'model paused after repeated failures',
      format.fallback_why('the summarization model is paused after 3 consecutive failures; it is tried again in 30000 ms' .. used)
    )
    assert.are.equal('no key in OPENAI_API_KEY', format.fallback_why('no key in OPENAI_API_KEY' .. used))
    assert.are.equal(string.rep('x', 47) .. '…', format.fallback_why(string.rep('x', 80)))
  end)

  it('lists flight records and capsules newest first, or says there are none', function()
    assert.are.same({ 'No flight records yet.' }, format.flight_lines({}))
    local lines = format.flight_lines({
      { ts = '2026-11-29T10:00:00Z', outcome = 'completed', trigger = 'auto_threshold', tokensBefore = 40000, tokensAfter = 10000, hardLimit = 48800, softLimit = 39040, durationMs = 900, checkpointId = 'ck_1', sessionId = 's_1', reason = 'compacted' },
      { ts = '2026-11-29T11:00:00Z', outcome = 'skipped', trigger = 'manual', tokensBefore = 900, tokensAfter = 900, hardLimit = 48800, softLimit = 39040, durationMs = 2, checkpointId = vim.NIL, sessionId = 's_1', reason = 'nothing to compact' },
    })
    assert.are.same({
      '2026-11-29T11:00:00Z  skipped   manual           900 → 900 (hard 48.8k, soft 39k)  2 ms  -  s_1  nothing to compact',
      '2026-11-29T10:00:00Z  completed auto_threshold   40k → 10k (hard 48.8k, soft 39k)  900 ms  ck_1  s_1  compacted',
    }, lines)
    assert.are.same({ 'No capsules in the active session yet.' }, format.capsule_lines({}))
    assert.are.same(
      { 'ck_7  Auth hand-off  manual · model · 2.4k tokens · loaded' },
      format.capsule_lines({ { checkpointId = 'ck_7', title = 'Auth hand-off', trigger = 'manual', quality = 'model', ts = 't', tokens = { before = 40000, after = 3100, capsule = 2400 }, origin = 'loaded' } })
    )
  end)

  it('names capsule files after their title', function()
    assert.are.equal('auth-refactor-hand-off.capsule.md', format.capsule_file_name('Auth refactor: hand-off!', 'ck_1'))
    assert.are.equal('ck_1.capsule.md', format.capsule_file_name('', 'ck_1'))
  end)
end)
