import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import {
  autoCompactLine,
  backgroundColorId,
  percentLeftUntilAutoCompact,
  budgetSummary,
  BudgetTracker,
  CompactionProgress,
  completionLine,
  formatTokens,
  severity,
  sourceExplanation,
  statusBarText,
  statusText,
  timeAgo,
  tooltipLines,
} from '../src/status';
import { drivenControl, followedControl, report, result } from './fixtures';

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
    assert.equal(completionLine(result()), 'user compact: 41.2k → 18.3k tokens (−56%), ck_3f9a, model');
    assert.equal(
      completionLine(result({ outcome: 'skipped', reason: 'nothing before the retained tail' })),
      'user compact skipped: nothing before the retained tail',
    );
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


  it('turns absolute percents into increments and ends with the daemon line', () => {
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
    assert.deepEqual(progress.handle({ ...base, phase: 'end', message: 'the line', result: result() }), [
      { kind: 'end', operationId: 'op_1', line: 'the line', warning: false },
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
    const [end] = progress.handle({ ...base, phase: 'end', result: result({ fallback: true, quality: 'degraded' }) });
    assert.deepEqual(end, {
      kind: 'end',
      operationId: 'op_2',
      line: 'user compact: 41.2k → 18.3k tokens (−56%), ck_3f9a, degraded',
      warning: true,
    });
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
