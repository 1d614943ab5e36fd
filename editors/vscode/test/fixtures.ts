import type { BudgetReport, CompactionResult } from '../src/protocol';

export function report(overrides: Partial<BudgetReport> = {}): BudgetReport {
  return {
    sessionId: 's_1',
    workspace: '/work/project',
    effectiveTokens: 31_200,
    hardLimit: 48_800,
    softLimit: 39_040,
    source: 'estimated',
    contextWindow: 64_000,
    maxOutputTokens: 8_000,
    autoCompact: true,
    lastCompaction: null,
    breakdown: { system: 1_200, tools: 2_000, capsule: 0, retainedTail: 0, newEntries: 28_000 },
    model: 'test-model',
    tokenizer: 'o200k_base',
    compacting: false,
    compactQueued: false,
    ...overrides,
  };
}

export function result(overrides: Partial<CompactionResult> = {}): CompactionResult {
  return {
    operationId: 'op_1',
    outcome: 'completed',
    reason: 'compacted',
    trigger: 'manual',
    tokensBefore: 41_200,
    tokensAfter: 18_300,
    reclaimedPercent: 55.6,
    checkpointId: 'ck_3f9a',
    quality: 'model',
    firstKeptEntryId: 'e_9',
    durationMs: 1200,
    fallback: false,
    ...overrides,
  };
}
