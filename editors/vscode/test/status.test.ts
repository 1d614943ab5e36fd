import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import {
  autoCompactLine,
  backgroundColorId,
  percentLeftUntilAutoCompact,
  budgetSummary,
  BudgetTracker,
  CompactionLog,
  CompactionProgress,
  completionLine,
  fallbackWarning,
  fallbackWhy,
  IDLE_TEXT,
  idleTooltipLines,
  formatTokens,
  severity,
  sourceExplanation,
  statusBarText,
  statusText,
  timeAgo,
  tooltipLines,
} from '../src/status';
import type { FlightRecord } from '../src/protocol';
import { drivenControl, followedAgent, followedControl, followedReport, report, result } from './fixtures';

describe('formatTokens', () => {
  it('keeps small counts exact and abbreviates thousands and millions', () => {
    assert.equal(formatTokens(0), '0');
    assert.equal(formatTokens(950), '950');
    assert.equal(formatTokens(1_234), '1.2k');
    assert.equal(formatTokens(48_800), '48.8k');
    assert.equal(formatTokens(128_000), '128k');
    assert.equal(formatTokens(999_960), '1M');
    assert.equal(formatTokens(1_250_000), '1.3M');
    assert.equal(formatTokens(-5), '0');
  });
});

describe('status text and colour', () => {
  it('shows effective tokens against the hard limit', () => {
    assert.equal(statusText(report()), '31.2k / 48.8k');
    assert.equal(statusBarText(report()), '$(dashboard) 31.2k / 48.8k');
  });

  it('is normal up to the soft limit, warning past it, error at the hard limit', () => {
    assert.equal(severity(report({ effectiveTokens: 39_040 })), 'normal');
    assert.equal(severity(report({ effectiveTokens: 39_041 })), 'warning');
    assert.equal(severity(report({ effectiveTokens: 48_799 })), 'warning');
    assert.equal(severity(report({ effectiveTokens: 48_800 })), 'error');
    assert.equal(backgroundColorId('normal'), undefined);
    assert.equal(backgroundColorId('warning'), 'statusBarItem.warningBackground');
    assert.equal(backgroundColorId('error'), 'statusBarItem.errorBackground');
    assert.equal(statusBarText(report({ effectiveTokens: 40_000 })), '$(warning) 40k / 48.8k');
  });

  it('spins while a compaction runs', () => {
    assert.equal(statusBarText(report({ compacting: true })), '$(sync~spin) 31.2k / 48.8k');
  });

  it('shows a queued /compact as pending until the agent\'s model call ends', () => {
    assert.equal(statusBarText(report({ compactQueued: true })), '$(clock) 31.2k / 48.8k');
    assert.ok(
      tooltipLines(report({ compactQueued: true }), new Date()).some((l) => l.startsWith('Compaction queued')),
    );
  });
});

describe('tooltip', () => {
  const now = new Date('2026-11-29T12:10:00Z');

  it('names the soft limit, the source, auto-compact and that nothing was compacted yet', () => {
    assert.deepEqual(tooltipLines(report(), now), [
      'SOBA context budget: 31.2k / 48.8k tokens',
      'Soft limit: 39k (auto-compaction starts past it)',
      'Measured: estimated (test-model, o200k_base)',
      "Estimated: no usage report from the provider since the latest capsule, so SOBA counted the context with o200k_base, the model's own tokenizer",
      'Auto-compact: on, 20% left (7.8k tokens) until it starts',
      'Last compaction: none yet',
    ]);
  });

  it('says the followed agent compacts, never that SOBA compacts before the next response', () => {
    const lines = tooltipLines(report({ effectiveTokens: 45_000, softLimit: 40_000, control: followedControl }), now);
    assert.deepEqual(lines.slice(0, 5), [
      'SOBA context budget: 45k / 48.8k tokens',
      'Soft limit: 40k',
      'Measured: estimated (test-model, o200k_base)',
      "Estimated: no usage report from the provider since the latest capsule, so SOBA counted the context with o200k_base, the model's own tokenizer",
      "Claude Code compacts this session itself; SOBA follows it, and SOBA's hook adds its capsule after each of Claude Code's compactions.",
    ]);
    assert.ok(!lines.some((l) => /Auto-compact|compacts before the next response|auto-compaction starts/.test(l)), lines.join('\n'));
    // A session SOBA drives keeps SOBA's promise.
    const driven = tooltipLines(report({ effectiveTokens: 45_000, softLimit: 40_000, control: drivenControl }), now);
    assert.ok(driven.includes('Auto-compact: on, 0% left: past the soft limit, it compacts before the next response'));
  });

  it('explains what "estimated" and "provider usage" mean, and a tokenizer that is not the model\'s own', () => {
    const provisional = report({ calibration: { tokenizer: 'o200k_base', factor: 1.38, source: 'provisional' } });
    assert.equal(
      sourceExplanation(provisional),
      "Estimated: no usage report from the provider since the latest capsule, so SOBA counted the context with o200k_base, not the model's own tokenizer (scaled × 1.38)",
    );
    assert.equal(
      sourceExplanation(report({ source: 'provider_usage' })),
      "Provider usage: the input tokens the provider reported for the last response, plus what came after it counted with o200k_base, the model's own tokenizer",
    );
  });

  it('gives the percent left until auto-compact, and 0% past the soft limit', () => {
    assert.equal(percentLeftUntilAutoCompact(report({ effectiveTokens: 0, softLimit: 40_000 })), 100);
    assert.equal(percentLeftUntilAutoCompact(report({ effectiveTokens: 30_000, softLimit: 40_000 })), 25);
    assert.equal(percentLeftUntilAutoCompact(report({ effectiveTokens: 45_000, softLimit: 40_000 })), 0);
    assert.equal(autoCompactLine(report({ effectiveTokens: 30_000, softLimit: 40_000 })), 'Auto-compact: on, 25% left (10k tokens) until it starts');
    assert.equal(
      autoCompactLine(report({ effectiveTokens: 45_000, softLimit: 40_000 })),
      'Auto-compact: on, 0% left: past the soft limit, it compacts before the next response',
    );
    assert.match(autoCompactLine(report({ effectiveTokens: 45_000, softLimit: 40_000, autoCompact: false })), /^Auto-compact: off, past the soft limit/);
  });

  it('describes the last compaction and provider-measured budgets', () => {
    const lines = tooltipLines(
      report({
        source: 'provider_usage',
        autoCompact: false,
        compacting: true,
        lastCompaction: {
          checkpointId: 'ck_3f9a',
          trigger: 'auto_threshold',
          quality: 'degraded',
          tokensBefore: 41_200,
          tokensAfter: 18_300,
          ts: '2026-11-29T12:05:00Z',
        },
      }),
      now,
    );
    assert.equal(lines[2], 'Measured: provider usage (test-model, o200k_base)');
    const learned = report({ calibration: { tokenizer: 'o200k_base', factor: 1.234, source: 'session' } });
    assert.equal(tooltipLines(learned, now)[2], 'Measured: estimated (test-model, o200k_base × 1.23, learned from this session)');
    const provisional = report({ calibration: { tokenizer: 'o200k_base', factor: 1.38, source: 'provisional' } });
    assert.equal(
      tooltipLines(provisional, now)[2],
      'Measured: estimated (test-model, o200k_base × 1.38, catalog factor + margin until a usage report teaches one)',
    );
    const catalog = report({ calibration: { tokenizer: 'o200k_base', factor: 1.15, source: 'catalog' } });
    assert.equal(tooltipLines(catalog, now)[2], 'Measured: estimated (test-model, o200k_base × 1.15, catalog factor)');
    const exact = report({ calibration: { tokenizer: 'o200k_base', factor: 1, source: 'exact' } });
    assert.equal(tooltipLines(exact, now)[2], 'Measured: estimated (test-model, o200k_base)');
    assert.match(lines[3], /^Provider usage: /);
    assert.equal(lines[4], 'Auto-compact: off (20% left until the soft limit; compaction still runs at the hard limit)');
    assert.equal(lines[5], 'Last compaction: auto_threshold: 41.2k → 18.3k (−56%), ck_3f9a, degraded, 5 min ago');
    assert.equal(lines[6], 'Compacting now…');
  });

  it('says how long ago in words and passes unparsable stamps through', () => {
    assert.equal(timeAgo('2026-11-29T12:09:30Z', now), 'just now');
    assert.equal(timeAgo('2026-11-29T09:10:00Z', now), '3 h ago');
    assert.equal(timeAgo('2026-11-25T12:10:00Z', now), '4 days ago');
    assert.equal(timeAgo('yesterday', now), 'yesterday');
  });
});

describe('summaries', () => {
  it('summarises the budget in one line', () => {
    assert.equal(
      budgetSummary(report()),
      'Context budget: 31.2k / 48.8k tokens (64% of the hard limit), soft limit 39k, estimated, auto-compact on',
    );
  });

  it('writes the completion line of a compaction and the reason of any other outcome', () => {
    assert.equal(completionLine(result()), 'user compact: 41.2k → 18.3k tokens (−56%), model, ck_3f9a');
    assert.equal(completionLine(result({ quality: 'local' })), 'user compact: 41.2k → 18.3k tokens (−56%), local, ck_3f9a');
    assert.equal(
      completionLine(result({ outcome: 'skipped', reason: 'nothing before the retained tail' })),
      'user compact skipped: nothing before the retained tail',
    );
  });

  it('says first why a compaction fell back, in a few words', () => {
    const degraded = result({
      fallback: true,
      quality: 'degraded',
      reason: 'the summarization model did not finish within 30000 ms; the local capsule was used',
    });
    assert.equal(completionLine(degraded), 'user compact, degraded (model timed out): 41.2k → 18.3k tokens (−56%), ck_3f9a');
  });

  it('names each way the summarization model fails in a few words', () => {
    const used = '; the local capsule was used';
    assert.equal(fallbackWhy(`the summarization model did not finish within 30000 ms${used}`), 'model timed out');
    assert.equal(fallbackWhy(`the summarization model answered HTTP 503: overloaded${used}`), 'model answered HTTP 503');
    assert.equal(fallbackWhy(`could not talk to the summarization model: connection refused${used}`), 'model unreachable');
    assert.equal(fallbackWhy(`the summarization model's stream ended before the reply was complete${used}`), 'model reply cut off');
    assert.equal(fallbackWhy(`invalid reply from the summarization model: no JSON object (asked twice)${used}`), 'invalid model reply');
    assert.equal(fallbackWhy(`the summarization model reported an error: quota${used}`), 'model reported an error');
    assert.equal(
      fallbackWhy(`the summarization model is paused after 3 consecutive failures; it is tried again in 30000 ms${used}`),
      'model paused after repeated failures',
    );
    // Any other reason: its first clause, cut to a few words.
    assert.equal(fallbackWhy(`no key in OPENAI_API_KEY${used}`), 'no key in OPENAI_API_KEY');
    assert.equal(fallbackWhy('x'.repeat(80)), `${'x'.repeat(47)}…`);
  });

  it('says a cancelled compaction wrote nothing, not why it failed', () => {
    assert.equal(
      completionLine(result({ outcome: 'cancelled', reason: 'cancelled by a client', checkpointId: null, quality: null })),
      'user compact cancelled: no capsule written; the context is unchanged',
    );
  });

  it('reports a created capsule as a creation that leaves the context as it was, not as a compaction', () => {
    const created = result({ trigger: 'handoff', tokensBefore: 117_600, tokensAfter: 117_600, reclaimedPercent: 0, quality: 'local' });
    assert.equal(completionLine(created), 'capsule created: ck_3f9a (local); the context is unchanged at 117.6k tokens');
    assert.equal(
      completionLine(result({ trigger: 'handoff', outcome: 'stale', reason: 'the session changed' })),
      'capsule creation stale: the session changed',
    );
  });
});

describe('BudgetTracker', () => {
  it('shows the most recently changed session of an open workspace and ignores other workspaces', () => {
    const tracker = new BudgetTracker(() => ['/work/project/']);
    const shown = () => tracker.report?.sessionId;
    assert.equal(shown(), undefined);
    assert.equal(tracker.accept(report({ workspace: '/elsewhere' })), false);
    assert.equal(shown(), undefined);
    assert.equal(tracker.accept(report({ sessionId: 's_1' })), true);
    assert.equal(tracker.accept(report({ sessionId: 's_2', effectiveTokens: 10 })), true);
    assert.equal(shown(), 's_2');
    tracker.clear();
    assert.equal(shown(), undefined);
  });

  it('lets go of the shown session when it is closed, and only then', () => {
    const tracker = new BudgetTracker(() => []);
    tracker.accept(report({ sessionId: 's_1' }));
    assert.equal(tracker.forget('s_other'), false);
    assert.equal(tracker.report?.sessionId, 's_1');
    assert.equal(tracker.forget('s_1'), true);
    assert.equal(tracker.report, undefined);
    assert.equal(tracker.forget('s_1'), false);
  });

  it('accepts every workspace when the editor has no folder open', () => {
    const tracker = new BudgetTracker(() => []);
    assert.equal(tracker.accept(report({ workspace: '/anywhere' })), true);
  });
});

describe('CompactionProgress', () => {
  it("titles a compaction as the daemon words its trigger", () => {
    const progress = new CompactionProgress();
    assert.deepEqual(
      progress.handle({ sessionId: 's_1', operationId: 'op_9', trigger: 'user', phase: 'start', title: 'Compacting context (/compact)' }),
      [{ kind: 'begin', operationId: 'op_9', sessionId: 's_1', title: 'Compacting context (/compact)' }],
    );
  });


  it('turns absolute percents into increments and ends with the result line', () => {
    const progress = new CompactionProgress();
    const base = { sessionId: 's_1', operationId: 'op_1', trigger: 'auto_threshold' as const };
    assert.deepEqual(progress.handle({ ...base, phase: 'start' }), [
      { kind: 'begin', operationId: 'op_1', sessionId: 's_1', title: 'Compacting context (auto_threshold)' },
    ]);
    assert.deepEqual(progress.handle({ ...base, phase: 'progress', percent: 40 }), [
      { kind: 'report', operationId: 'op_1', increment: 40, message: '40%' },
    ]);
    assert.deepEqual(progress.handle({ ...base, phase: 'progress', percent: 82 }), [
      { kind: 'report', operationId: 'op_1', increment: 42, message: '82%' },
    ]);
    // Percents never go backwards, whatever arrives.
    assert.deepEqual(progress.handle({ ...base, phase: 'progress', percent: 50 }), [
      { kind: 'report', operationId: 'op_1', increment: 0, message: '82%' },
    ]);
    // The daemon's message does not say why a fallback fell back: the editor's line from the result does.
    assert.deepEqual(progress.handle({ ...base, phase: 'end', message: 'the daemon line', result: result() }), [
      { kind: 'end', operationId: 'op_1', line: 'user compact: 41.2k → 18.3k tokens (−56%), model, ck_3f9a', warning: false },
    ]);
    assert.equal(progress.claim('op_1'), false, 'the end notification showed the result');
  });

  it('shows a capsule creation as one, and leaves its message to the Create Capsule command', () => {
    const progress = new CompactionProgress();
    const base = { sessionId: 's_1', operationId: 'op_h', trigger: 'handoff' as const };
    assert.deepEqual(progress.handle({ ...base, phase: 'start' }), [{ kind: 'begin', operationId: 'op_h', sessionId: 's_1', title: 'Creating capsule' }]);
    const created = result({ trigger: 'handoff', quality: 'local', reclaimedPercent: 0 });
    assert.deepEqual(progress.handle({ ...base, phase: 'end', message: 'capsule created: ck_3f9a (local)', result: created }), [
      { kind: 'end', operationId: 'op_h', line: undefined, warning: false },
    ]);
  });

  it('closes the progress without a second line when the command showed the result first', () => {
    const progress = new CompactionProgress();
    const base = { sessionId: 's_1', operationId: 'op_3', trigger: 'user' as const };
    progress.handle({ ...base, phase: 'start' });
    assert.equal(progress.claim('op_3'), true);
    assert.equal(progress.claim('op_3'), false);
    assert.deepEqual(progress.handle({ ...base, phase: 'end', message: 'the line' }), [
      { kind: 'end', operationId: 'op_3', line: undefined, warning: false },
    ]);
  });

  it('begins a progress it did not see start and warns on a degraded result', () => {
    const progress = new CompactionProgress();
    const base = { sessionId: 's_1', operationId: 'op_2', trigger: 'context_overflow' as const };
    const actions = progress.handle({ ...base, phase: 'progress', percent: 10 });
    assert.equal(actions[0].kind, 'begin');
    assert.deepEqual(actions[1], { kind: 'report', operationId: 'op_2', increment: 10, message: '10%' });
    const degraded = result({ fallback: true, quality: 'degraded', reason: 'the summarization model answered HTTP 500: boom; the local capsule was used' });
    const [end] = progress.handle({ ...base, phase: 'end', result: degraded });
    assert.deepEqual(end, {
      kind: 'end',
      operationId: 'op_2',
      line: 'user compact, degraded (model answered HTTP 500): 41.2k → 18.3k tokens (−56%), ck_3f9a',
      warning: true,
    });
  });

  it("takes the daemon's fallback warning as said by the result line, once, and no other message", () => {
    const progress = new CompactionProgress();
    const degraded = result({ fallback: true, quality: 'degraded', reason: 'the summarization model did not finish within 5 ms; the local capsule was used' });
    assert.equal(progress.absorbs(fallbackWarning(degraded)), false, 'before the compaction ended');
    // The command that asked showed the result first: the end shows nothing, the warning is still absorbed.
    assert.equal(progress.claim('op_4'), true);
    progress.handle({ sessionId: 's_1', operationId: 'op_4', trigger: 'user', phase: 'end', result: degraded });
    assert.equal(progress.absorbs('file changes in /w are not recorded: too many files'), false);
    assert.equal(progress.absorbs(fallbackWarning(degraded)), true);
    assert.equal(progress.absorbs(fallbackWarning(degraded)), false, 'only once');
    // A created capsule's fallback is reported by Create Capsule, which does not say why: the warning stays.
    progress.handle({ sessionId: 's_1', operationId: 'op_h', trigger: 'handoff', phase: 'end', result: { ...degraded, trigger: 'handoff' } });
    assert.equal(progress.absorbs(fallbackWarning(degraded)), false);
  });

  it('knows which session runs a compaction until it ends, for Cancel', () => {
    const progress = new CompactionProgress();
    assert.equal(progress.runningSession(), undefined);
    progress.handle({ sessionId: 's_a', operationId: 'op_a', trigger: 'user', phase: 'start' });
    progress.handle({ sessionId: 's_b', operationId: 'op_b', trigger: 'auto_threshold', phase: 'progress', percent: 5 });
    assert.equal(progress.runningSession(), 's_b', 'the newest');
    progress.handle({ sessionId: 's_b', operationId: 'op_b', trigger: 'auto_threshold', phase: 'end' });
    assert.equal(progress.runningSession(), 's_a');
    progress.handle({ sessionId: 's_a', operationId: 'op_a', trigger: 'user', phase: 'end' });
    assert.equal(progress.runningSession(), undefined);
  });

  it('ends a cancelled compaction with its plain line, not a warning, whatever the daemon worded', () => {
    const progress = new CompactionProgress();
    const base = { sessionId: 's_1', operationId: 'op_c', trigger: 'user' as const };
    progress.handle({ ...base, phase: 'start' });
    const cancelled = result({ operationId: 'op_c', outcome: 'cancelled', reason: 'cancelled', checkpointId: null, quality: null });
    assert.deepEqual(progress.handle({ ...base, phase: 'end', message: 'user compact cancelled: cancelled', result: cancelled }), [
      { kind: 'end', operationId: 'op_c', line: 'user compact cancelled: no capsule written; the context is unchanged', warning: false },
    ]);
  });
});

describe('CompactionLog', () => {
  const now = new Date('2026-11-29T12:00:00Z');
  const record = (overrides: Partial<FlightRecord>): FlightRecord => ({
    operationId: 'op_1',
    sessionId: 's_1',
    trigger: 'auto_threshold',
    outcome: 'completed',
    reason: 'compacted',
    durationMs: 900,
    checkpointId: 'ck_1',
    tokensBefore: 40_000,
    tokensAfter: 10_000,
    reclaimed: 30_000,
    hardLimit: 48_800,
    softLimit: 39_040,
    ts: '2026-11-29T12:00:00Z',
    ...overrides,
  });

  it('writes each compaction once with its quality and whole reason, from its end or its flight record', () => {
    const log = new CompactionLog();
    const why = 'the summarization model did not finish within 30000 ms; the local capsule was used';
    const end = { sessionId: 's_1', operationId: 'op_1', trigger: 'user' as const, phase: 'end' as const };
    assert.equal(log.ended({ ...end, phase: 'progress', percent: 5 }, now), undefined);
    assert.equal(
      log.ended({ ...end, result: result({ operationId: 'op_1', fallback: true, quality: 'degraded', reason: why }) }, now),
      `2026-11-29T12:00:00.000Z user completed: 41.2k → 18.3k tokens, degraded (fallback), ck_3f9a, 1200 ms: ${why}`,
    );
    assert.equal(log.ended({ ...end, result: result({ operationId: 'op_1' }) }, now), undefined, 'once');
    assert.equal(
      log.ended({ ...end, operationId: 'op_2', message: 'the compaction could not be written: disk full' }, now),
      '2026-11-29T12:00:00.000Z user failed: the compaction could not be written: disk full',
    );
    // The records of before the editor connected are Show Flight Records' to list.
    assert.deepEqual(log.recorded([record({ operationId: 'op_0' })]), []);
    // A skip sends no notification: its record is where it is written from; op_1 was written already.
    assert.deepEqual(
      log.recorded([
        record({ operationId: 'op_0' }),
        record({ operationId: 'op_1' }),
        record({ operationId: 'op_3', outcome: 'skipped', trigger: 'auto_threshold', checkpointId: null, tokensAfter: 40_000, reason: 'nothing before the retained tail', ts: '2026-11-29T12:02:00Z' }),
        record({ operationId: 'op_4', outcome: 'failed', trigger: 'hard_limit', checkpointId: null, reason: 'context budget exceeded', ts: '2026-11-29T12:01:00Z' }),
      ]),
      [
        '2026-11-29T12:01:00Z hard_limit failed: 40k → 10k tokens, no checkpoint, 900 ms: context budget exceeded',
        '2026-11-29T12:02:00Z auto_threshold skipped: 40k → 40k tokens, no checkpoint, 900 ms: nothing before the retained tail',
      ],
    );
    assert.deepEqual(log.recorded([record({ operationId: 'op_3' })]), []);
  });
});

describe('idle state', () => {
  it('says the extension is connected with no agent session yet, and how one appears', () => {
    assert.equal(IDLE_TEXT, '$(dashboard) SOBA: no agent session');
    const tooltip = idleTooltipLines().join('\n');
    assert.match(tooltip, /^SOBA is connected: no agent session in this workspace yet\./);
    for (const way of ['SOBA SDK', '`soba proxy`', '`soba attach`']) assert.ok(tooltip.includes(way), way);
  });
});

describe('a followed agent as it sees itself', () => {
  const now = new Date('2026-12-01T10:10:00Z');

  it('says the model is not known yet before the first response, never another model\'s limits', () => {
    const early = followedReport({
      effectiveTokens: 30,
      hardLimit: 103_400,
      model: 'gpt-4o',
      followed: followedAgent({
        model: undefined,
        modelSource: 'unknown',
        compactsAt: undefined,
        text: "model not known yet: Claude Code's first response names it; no limits are shown until then",
      }),
    });
    assert.equal(statusText(early), '30 · model not known yet');
    assert.equal(severity(early), 'normal');
    const tooltip = tooltipLines(early, now).join('\n');
    assert.match(tooltip, /^SOBA context budget: 30 tokens, model not known yet$/m);
    assert.match(tooltip, /model not known yet: Claude Code's first response names it/);
    assert.doesNotMatch(tooltip, /gpt-4o|103\.4k/, tooltip);
    assert.doesNotMatch(budgetSummary(early), /gpt-4o|103\.4k/);
  });

  it('colours the bar by the agent\'s own threshold and names SOBA\'s hard limit as SOBA\'s', () => {
    const healthy = followedReport();
    assert.equal(statusText(healthy), '150k / 167k');
    assert.equal(severity(healthy), 'normal', 'past SOBA\'s hard limit, under the agent\'s own threshold: no red');
    assert.equal(severity(followedReport({ effectiveTokens: 167_000 })), 'warning');
    const lines = tooltipLines(healthy, now);
    assert.ok(lines.includes("Claude Code compacts at ~167.0k (claude-sonnet-4-5); SOBA's hard limit 127.8k"), lines.join('\n'));
    assert.match(budgetSummary(healthy), /^Context budget: 150k \/ 167k tokens \(90% of where Claude Code compacts\), estimated; Claude Code compacts at/);
    const fromSettings = followedReport({
      followed: followedAgent({ modelSource: 'settings', settingsFile: '/home/u/.claude/settings.json' }),
    });
    assert.equal(statusText(fromSettings), '150k / 167k');
  });

  it('shows the agent\'s own compaction as the last compaction', () => {
    const compacted = followedReport({
      effectiveTokens: 21_000,
      followed: followedAgent({
        lastCompaction: { entryId: 'e_cb', ts: '2026-12-01T10:05:00Z', trigger: 'auto', tokensBefore: 150_000, summaryTokens: 2_200 },
      }),
    });
    assert.ok(
      tooltipLines(compacted, now).includes("Last compaction: Claude Code's own (auto): 150k → summary 2.2k, 5 min ago"),
      tooltipLines(compacted, now).join('\n'),
    );
  });
});
