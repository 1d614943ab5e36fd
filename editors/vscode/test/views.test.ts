import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import type { FlightRecord } from '../src/protocol';
import { budgetNodes, capsuleNodes, compactionNodes, flightLines, sessionNodes } from '../src/views';
import { followedAgent, followedControl, followedReport, noUnseen, report } from './fixtures';

function record(overrides: Partial<FlightRecord>): FlightRecord {
  return {
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
  };
}

describe('sidebar view models', () => {
  it('lists sessions with the active one marked', () => {
    const nodes = sessionNodes([
      { sessionId: 's_1', workspace: '/w', path: '/d/s_1.jsonl', active: false, entries: 3, inMemory: true, effectiveTokens: 900, hardLimit: 48_800, lastCompaction: null },
      { sessionId: 's_2', workspace: '/w', path: '/d/s_2.jsonl', active: true, entries: 40, inMemory: true, effectiveTokens: 31_200, hardLimit: 48_800, lastCompaction: null },
    ]);
    assert.deepEqual(
      nodes.map((n) => [n.label, n.description, n.contextValue]),
      [
        ['s_1', '900 / 48.8k · 3 entries', 'session'],
        ['s_2', 'active · 31.2k / 48.8k · 40 entries', 'session.active'],
      ],
    );
  });

  it('says who compacts a followed session instead of an auto-compact that never runs for it', () => {
    const nodes = budgetNodes(report({ control: followedControl }));
    const last = nodes.at(-1);
    assert.deepEqual([last?.label, last?.description], ['Compacted by', 'claude-code itself']);
    assert.match(last?.tooltip ?? '', /^Claude Code compacts this session itself/);
    assert.ok(!nodes.some((n) => n.label === 'Auto-compact'));
  });

  it('breaks the budget down and says when there is no session', () => {
    assert.deepEqual(budgetNodes(undefined).map((n) => n.label), ['No active session']);
    const nodes = budgetNodes(report({ autoCompact: false }));
    assert.deepEqual(
      nodes.map((n) => [n.label, n.description]),
      [
        ['Effective', '31.2k / 48.8k (estimated)'],
        ['Soft limit', '39k'],
        ['System prompt', '1.2k'],
        ['Tool schemas', '2k'],
        ['Capsule', '0'],
        ['Retained tail', '0'],
        ['New entries', '28k'],
        ['Auto-compact', 'off'],
      ],
    );
    assert.equal(nodes[0].command, 'soba.showBudget');
  });

  it('adds the rest of the total as a part, so the parts sum to the total', () => {
    // A followed agent whose system prompt and tools are not in the log: 103.7k counted of 136.5k.
    const followed = report({
      source: 'provider_usage',
      effectiveTokens: 136_500,
      hardLimit: 160_000,
      breakdown: {
        system: 0,
        tools: 0,
        capsule: 2_200,
        retainedTail: 0,
        newEntries: 101_500,
        notInLog: 32_800,
        counted: { system: 0, tools: 0, capsule: 2_200, retainedTail: 0, newEntries: 101_500 },
        unseen: noUnseen,
      },
    });
    const parts = budgetNodes(followed).filter((n) => n.icon === 'symbol-number');
    assert.deepEqual(parts.at(-1)?.label, 'Not in the log');
    assert.equal(parts.at(-1)?.description, '32.8k');
    const sum = [0, 0, 2_200, 0, 101_500, 32_800].reduce((a, b) => a + b, 0);
    assert.equal(sum, followed.effectiveTokens);
    // A part the daemon adds later counts too: the rest is whatever no part holds.
    const withAnotherPart = report({
      effectiveTokens: 40_000,
      breakdown: { system: 1_200, tools: 2_000, capsule: 0, retainedTail: 0, newEntries: 28_000, allowance: 4_000 } as never,
    });
    const scaled = budgetNodes(withAnotherPart).find((n) => n.id === 'budget:uncounted');
    assert.deepEqual([scaled?.label, scaled?.description], ['Tokenizer scale', '4.8k']);
  });

  it('shows the unseen-context allowance of an estimate once, beside the tokenizer scale, and the parts sum to the total', () => {
    // 31.2k counted × 1.15 = 35.9k, plus a 40.5k allowance for the agent's unseen system prompt and tools.
    const estimated = report({
      effectiveTokens: 76_380,
      calibration: { tokenizer: 'o200k_base', factor: 1.15, source: 'catalog' },
      breakdown: {
        system: 1_200,
        tools: 2_000,
        capsule: 0,
        retainedTail: 0,
        newEntries: 28_000,
        notInLog: 40_500,
        unseenText: 'not in the log: ~40.5k, default for Claude Code',
      } as never,
    });
    const parts = budgetNodes(estimated).filter((n) => n.icon === 'symbol-number');
    assert.deepEqual(
      parts.slice(-2).map((n) => [n.label, n.description]),
      [
        ['Not in the log', '40.5k'],
        ['Tokenizer scale', '4.7k'],
      ],
    );
    assert.equal(parts.filter((n) => n.label === 'Not in the log').length, 1);
    assert.equal(parts.find((n) => n.label === 'Not in the log')?.tooltip, 'not in the log: ~40.5k, default for Claude Code');
    const shown = 1_200 + 2_000 + 28_000 + 40_500 + 4_680;
    assert.equal(shown, estimated.effectiveTokens);
  });

  it('shows recent compactions newest first with outcome, trigger and reclaimed percent', () => {
    const nodes = compactionNodes([
      record({ operationId: 'op_old', ts: '2026-11-29T10:00:00Z' }),
      record({ operationId: 'op_new', ts: '2026-11-29T11:00:00Z', outcome: 'skipped', trigger: 'user', reason: 'nothing to compact', checkpointId: null }),
    ]);
    assert.deepEqual(
      nodes.map((n) => [n.id, n.label, n.description, n.checkpointId]),
      [
        ['compaction:op_new', 'skipped · user', 'nothing to compact', undefined],
        ['compaction:op_old', 'completed · auto_threshold', '−75% (40k → 10k)', 'ck_1'],
      ],
    );
    assert.equal(compactionNodes([record({}), record({ operationId: 'op_2' })], [], 1).length, 1);
  });

  it("shows a compaction's capsule quality, and why a degraded one fell back", () => {
    const why = 'the summarization model did not finish within 30000 ms; the local capsule was used';
    const capsule = (checkpointId: string, quality: 'model' | 'local' | 'degraded') =>
      ({ checkpointId, entryId: 'e', title: '', trigger: 'auto_threshold', quality, ts: 't', tokens: { before: 40_000, after: 10_000, capsule: 2_100 }, origin: 'session' }) as const;
    const nodes = compactionNodes(
      [
        record({ operationId: 'op_m', checkpointId: 'ck_m', ts: '2026-11-29T12:00:03Z' }),
        record({ operationId: 'op_l', checkpointId: 'ck_l', ts: '2026-11-29T12:00:02Z' }),
        record({ operationId: 'op_d', checkpointId: 'ck_d', reason: why, ts: '2026-11-29T12:00:01Z' }),
      ],
      [capsule('ck_m', 'model'), capsule('ck_l', 'local'), capsule('ck_d', 'degraded')],
    );
    assert.deepEqual(
      nodes.map((n) => [n.label, n.description, n.icon]),
      [
        ['model · auto_threshold', '−75% (40k → 10k)', 'pass'],
        ['local · auto_threshold', '−75% (40k → 10k)', 'pass'],
        ['degraded · auto_threshold', '−75% (40k → 10k) · model timed out', 'warning'],
      ],
    );
    assert.match(nodes[0].tooltip!, /Quality: model \(the summarization model wrote the capsule\)/);
    assert.match(nodes[1].tooltip!, /Quality: local/);
    assert.equal(
      nodes[2].tooltip,
      `2026-11-29T12:00:01Z · 900 ms · ck_d\nQuality: degraded (model timed out: the summarization model failed, so the local capsule stands in)\n${why}`,
    );
  });

  it('makes capsules exportable from the context menu', () => {
    const [node] = capsuleNodes([
      { checkpointId: 'ck_7', entryId: 'e_7', title: 'Auth hand-off', trigger: 'user', quality: 'model', ts: 't', tokens: { before: 40_000, after: 3_100, capsule: 2_400 }, origin: 'loaded' },
    ]);
    assert.equal(node.label, 'Auth hand-off');
    assert.equal(node.description, 'ck_7 · 2.4k · model · loaded');
    assert.equal(node.contextValue, 'capsule');
    assert.equal(node.checkpointId, 'ck_7');
  });

  it('prints flight records, or says there are none', () => {
    assert.deepEqual(flightLines([]), ['No flight records yet.']);
    const [line] = flightLines([record({})]);
    assert.match(line, /^2026-11-29T12:00:00Z {2}completed auto_threshold {3}40k → 10k \(hard 48.8k, soft 39k\) {2}900 ms {2}ck_1 {2}s_1 {2}compacted$/);
  });

  it('gives a followed agent its own threshold, SOBA\'s hard limit as SOBA\'s, and its own last compaction', () => {
    const now = new Date('2026-12-01T10:10:00Z');
    const nodes = budgetNodes(
      followedReport({
        followed: followedAgent({
          lastCompaction: { entryId: 'e_cb', ts: '2026-12-01T10:05:00Z', trigger: 'auto', tokensBefore: 150_000, summaryTokens: 2_200 },
        }),
      }),
      now,
    );
    const byId = new Map(nodes.map((n) => [n.id, n]));
    assert.equal(byId.get('budget:total')?.description, '150k / 167k (estimated)');
    assert.equal(byId.get('budget:agentCompactsAt')?.label, 'Claude Code compacts at');
    assert.equal(byId.get('budget:agentCompactsAt')?.description, '~167k · claude-sonnet-4-5');
    assert.equal(byId.get('budget:sobaHard')?.description, '127.8k');
    assert.equal(byId.get('budget:agentLast')?.description, "Claude Code's own (auto): 150k → summary 2.2k, 5 min ago");
    assert.ok(!byId.has('budget:soft'), 'SOBA\'s soft limit is not the followed agent\'s');
    const early = budgetNodes(followedReport({ followed: followedAgent({ modelSource: 'unknown', model: undefined, compactsAt: undefined }) }), now);
    assert.equal(early.find((n) => n.id === 'budget:agentCompactsAt')?.description, 'model not known yet');
  });

  it('never lists a created capsule among the compactions', () => {
    const nodes = compactionNodes([
      record({ operationId: 'op_c', trigger: 'user', ts: '2026-11-29T12:00:02Z' }),
      record({ operationId: 'op_h', trigger: 'handoff', ts: '2026-11-29T12:00:03Z' }),
    ]);
    assert.deepEqual(
      nodes.map((n) => n.id),
      ['compaction:op_c'],
    );
  });
});
