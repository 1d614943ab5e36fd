import type { BudgetReport, CompactionResult, Control, PreviewResult } from '../src/protocol';

/** A breakdown's `unseen` when nothing beyond the log is allowed for. */
export const noUnseen: BudgetReport['breakdown']['unseen'] = { tokens: 0, kind: 'none', source: 'none', learnedFrom: 0 };

export function report(overrides: Partial<BudgetReport> = {}): BudgetReport {
  return {
    sessionId: 's_1',
    workspace: '/work/project',
    effectiveTokens: 31_200,
    hardLimit: 48_800,
    softLimit: 39_040,
    source: 'estimated',
    contextWindow: 64_000,
    windowSource: 'configured',
    maxOutputTokens: 8_000,
    autoCompact: true,
    lastCompaction: null,
    breakdown: {
      system: 1_200,
      tools: 2_000,
      capsule: 0,
      retainedTail: 0,
      newEntries: 28_000,
      notInLog: 0,
      counted: { system: 1_200, tools: 2_000, capsule: 0, retainedTail: 0, newEntries: 28_000 },
      unseen: noUnseen,
    },
    model: 'test-model',
    tokenizer: 'o200k_base',
    calibration: { tokenizer: 'o200k_base', factor: 1, source: 'exact' },
    summarizer: { uses: 'local' },
    compacting: false,
    compactQueued: false,
    control: drivenControl,
    ...overrides,
  };
}

export function result(overrides: Partial<CompactionResult> = {}): CompactionResult {
  return {
    operationId: 'op_1',
    outcome: 'completed',
    reason: 'compacted',
    trigger: 'user',
    tokensBefore: 41_200,
    tokensAfter: 18_300,
    reclaimedPercent: 55.6,
    checkpointId: 'ck_3f9a',
    quality: 'model',
    firstKeptEntryId: 'e_9',
    durationMs: 1200,
    planningMs: 40,
    generationMs: 1160,
    fallback: false,
    hardLimit: 48_800,
    softLimit: 39_040,
    contextWindow: 64_000,
    ...overrides,
  };
}

/** What the daemon says of a followed Claude Code session whose transcript named its model. */
export function followedAgent(overrides: Partial<NonNullable<BudgetReport['followed']>> = {}): NonNullable<BudgetReport['followed']> {
  return {
    model: 'claude-sonnet-4-5',
    modelSource: 'transcript',
    compactsAt: 167_000,
    compactsAtBasis: 'Claude Code auto-compacts 13.0k below its usable window (200.0k less 20.0k kept for output)',
    text: "Claude Code compacts at ~167.0k (claude-sonnet-4-5); SOBA's hard limit 127.8k",
    ...overrides,
  };
}

/** A followed Claude Code session's budget, as the daemon reports it. */
export function followedReport(overrides: Partial<BudgetReport> = {}): BudgetReport {
  return report({
    effectiveTokens: 150_000,
    hardLimit: 127_800,
    softLimit: 102_200,
    contextWindow: 200_000,
    model: 'claude-sonnet-4-5',
    control: followedControl,
    followed: followedAgent(),
    ...overrides,
  });
}

/** A Claude Code session SOBA follows, with SOBA's hook installed: the daemon's sentences. */
export const followedControl: Control = {
  compactedBy: 'agent',
  agent: 'claude-code',
  integration: 'claude-code-hook',
  note: "Claude Code compacts this session itself; SOBA follows it, and SOBA's hook adds its capsule after each of Claude Code's compactions.",
  actions:
    "SOBA cannot change what Claude Code sends: compact, capsule load and rewind show what SOBA would send, as a preview. Run /compact in Claude Code: SOBA's hook adds SOBA's capsule to the new context.",
};

export const drivenControl: Control = {
  compactedBy: 'soba',
  note: "SOBA compacts this session before the agent's next response.",
  actions: "Compact, capsule load and rewind change the model input of the agent's next response.",
};

export function preview(overrides: Partial<PreviewResult> = {}): PreviewResult {
  return {
    sessionId: 's_1',
    action: 'compact',
    control: followedControl,
    tokensBefore: 130_600,
    tokensAfter: 24_800,
    notInLog: 20_000,
    text: '# What SOBA would send after compacting\n\n> Preview: nothing was changed, and the agent does not receive this.\n',
    ...overrides,
  };
}
