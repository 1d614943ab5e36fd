// The SOBA JSON-RPC protocol as the editor sees it, declared once.
// Mirrors the daemon's protocol contract (docs/protocol.md); keep both in step.
// Pure declarations: no `vscode` import, so the unit tests and the protocol test can use it.

export type MeasurementSource = 'provider_usage' | 'estimated';
/**
 * Who wrote a capsule: the summarization `model`; the `local` builder because no model is
 * configured (the normal case without one); or the local builder standing in for a configured
 * model that failed or timed out (`degraded`, the spec's fallback).
 */
export type Quality = 'model' | 'local' | 'degraded';
export type CalibrationSource = 'exact' | 'catalog' | 'config' | 'session' | 'provisional';

/** How the counted part of the budget was estimated: the tokenizer and the factor on it. */
export interface Calibration {
  tokenizer: string;
  factor: number;
  source: CalibrationSource;
}
export type Outcome = 'completed' | 'skipped' | 'cancelled' | 'stale' | 'failed';

export interface LastCompaction {
  checkpointId: string;
  trigger: string;
  quality: Quality;
  tokensBefore: number;
  tokensAfter: number;
  ts: string;
}

export interface BudgetBreakdown {
  system: number;
  tools: number;
  capsule: number;
  retainedTail: number;
  newEntries: number;
  /** Provider-counted tokens no part of the log accounts for (an imported session's prompt and tools). */
  notInLog?: number;
  /** The allowance for what the provider counts beyond the log, in words
   * (`not in the log: ~39.9k, learned from 12 Claude Code sessions`); absent when there is none. */
  unseenText?: string;
}

/** Who compacts a session: SOBA (an agent takes its input from SOBA) or the agent SOBA follows. */
export interface Control {
  compactedBy: 'soba' | 'agent';
  /** The followed agent: `claude-code`, `codex` or `pi`. */
  agent?: string;
  /** How the followed agent's own compactions reach SOBA, when installed. */
  integration?: 'claude-code-hook' | 'pi-extension';
  /** One sentence: who compacts, and when. */
  note: string;
  /** What compact, capsule load and rewind do for this session. */
  actions: string;
}

export interface BudgetReport {
  sessionId: string;
  workspace: string;
  effectiveTokens: number;
  hardLimit: number;
  softLimit: number;
  source: MeasurementSource;
  contextWindow: number;
  maxOutputTokens: number;
  autoCompact: boolean;
  lastCompaction: LastCompaction | null;
  breakdown: BudgetBreakdown;
  model: string;
  tokenizer: string;
  /** Absent from daemons older than the count factor. */
  calibration?: Calibration;
  compacting: boolean;
  /** An explicit /compact waits for the agent's inference to end. */
  compactQueued?: boolean;
  /** Absent from daemons that only knew sessions SOBA compacts. */
  control?: Control;
}

/** `soba/preview`: what SOBA would send after an action, changing nothing. */
export interface PreviewResult {
  sessionId: string;
  action: 'compact' | 'capsuleLoad' | 'rewind';
  control: Control;
  tokensBefore: number;
  tokensAfter: number;
  /** Markdown, headed by what it is and who compacts. */
  text: string;
}

export type PreviewAction =
  | { action: 'compact'; instructions?: string }
  | { action: 'capsuleLoad'; path: string }
  | { action: 'rewind'; entryId: string };

export interface CompactionResult {
  operationId: string;
  outcome: Outcome;
  reason: string;
  trigger: string;
  tokensBefore: number;
  tokensAfter: number;
  reclaimedPercent: number;
  checkpointId: string | null;
  quality: Quality | null;
  firstKeptEntryId: string | null;
  durationMs: number;
  /** A configured model failed; the local capsule stands in (who wrote it: `quality`). */
  fallback: boolean;
}

export interface CompactionEvent {
  sessionId: string;
  operationId: string;
  phase: 'start' | 'progress' | 'end';
  trigger: string;
  percent?: number;
  result?: CompactionResult;
  /** On `end`: the persistent completion line. */
  message?: string;
  /** On `start`: the operation's name while it runs, worded by its trigger. */
  title?: string;
}

export interface SessionSummary {
  sessionId: string;
  workspace: string;
  path: string;
  active: boolean;
  entries: number;
  effectiveTokens: number;
  hardLimit: number;
  lastCompaction: LastCompaction | null;
}

export interface FlightRecord {
  operationId: string;
  sessionId: string;
  trigger: string;
  outcome: Outcome;
  reason: string;
  durationMs: number;
  checkpointId: string | null;
  tokensBefore: number;
  tokensAfter: number;
  reclaimed: number;
  hardLimit: number;
  softLimit: number;
  ts: string;
}

export interface CapsuleSummary {
  checkpointId: string;
  /** The capsule's log entry: what `soba/rewind` takes. */
  entryId: string;
  title: string;
  trigger: string;
  quality: Quality;
  ts: string;
  tokens: { before: number; after: number };
  origin: 'session' | 'loaded';
}

/** `soba/context`: what fills the context window. */
export interface ContextResult {
  sessionId: string;
  workspace: string;
  effectiveTokens: number;
  hardLimit: number;
  softLimit: number;
  /** Absent from daemons that only knew sessions SOBA compacts. */
  control?: Control;
  /** How `effectiveTokens` was measured; the parts are SOBA's counts either way. */
  source: MeasurementSource;
  tokens: number;
  breakdown: BudgetReport['breakdown'];
  byKind: {
    system: number;
    toolSchemas: number;
    capsule: number;
    userMessages: number;
    assistantMessages: number;
    fileReads: number;
    toolOutputs: number;
  };
  largest: Array<{
    entryId?: string | null;
    kind: 'capsule' | 'user' | 'assistant' | 'file' | 'tool_output';
    label: string;
    path?: string;
    tokens: number;
    part: 'capsule' | 'retained_tail' | 'new';
    elided: boolean;
  }>;
  capsule: { checkpointId: string; entryId: string; title?: string | null; trigger: string; quality: string; tokens: number; text: string } | null;
}

/** Which session an editor-side request is about: omitted fields mean the workspace's active session. */
export interface SessionTarget {
  sessionId?: string;
  workspace?: string;
}

export interface ModelOverride {
  name?: string;
  contextWindow?: number;
  maxOutputTokens?: number;
}

/** Request method → [params, result]. */
export interface Requests {
  'soba/session/open': [
    { workspace: string; sessionId?: string; create?: boolean; model?: ModelOverride },
    { sessionId: string; path: string; budget: BudgetReport },
  ];
  'soba/session/append': [
    { sessionId: string; entries: Array<Record<string, unknown>> },
    { entryIds: string[]; leafId: string; budget: BudgetReport },
  ];
  'soba/session/close': [{ sessionId: string }, { sessionId: string; path: string }];
  'soba/budget': [SessionTarget, BudgetReport];
  'soba/compact': [SessionTarget & { instructions?: string; mirror?: boolean }, CompactionResult];
  'soba/autoCompact': [SessionTarget & { enabled: boolean }, { autoCompact: boolean }];
  'soba/sessions': [{ workspace?: string }, { sessions: SessionSummary[] }];
  'soba/flight': [SessionTarget & { limit?: number }, { records: FlightRecord[] }];
  'soba/capsule/create': [SessionTarget & { title: string }, { checkpointId: string; title: string; tokens: number }];
  'soba/capsule/export': [SessionTarget & { checkpointId: string; path: string }, { path: string }];
  'soba/capsule/load': [SessionTarget & { path: string }, { checkpointId: string; sessionId: string }];
  'soba/capsule/list': [SessionTarget, { capsules: CapsuleSummary[] }];
  'soba/context': [SessionTarget & { limit?: number }, ContextResult];
  'soba/rewind': [{ sessionId: string; entryId: string }, { leafId: string | null; budget: BudgetReport }];
  'soba/preview': [SessionTarget & PreviewAction, PreviewResult];
}

export type RequestMethod = keyof Requests;
export type ParamsOf<M extends RequestMethod> = Requests[M][0];
export type ResultOf<M extends RequestMethod> = Requests[M][1];

export const BUDGET_CHANGED = 'soba/budgetChanged';
export const COMPACTION = 'soba/compaction';
export const SESSION_CLOSED = 'soba/session/closed';

/** `soba/session/closed`: the session left the daemon (its agent closed it). */
export interface SessionClosed {
  sessionId: string;
  workspace: string;
  /** `idle`: closed to bound the daemon's memory; the next request for it opens it again. */
  reason: "closed" | "idle";
}

/** JSON-RPC error codes the daemon uses. */
export const ErrorCodes = {
  invalidParams: -32602,
  contextBudgetExceeded: -32001,
  unknownSession: -32002,
  overflowRetryUsed: -32003,
  sessionLocked: -32004,
  agentCompacts: -32005,
} as const;

/** Sends one typed request; implemented over vscode-languageclient or vscode-jsonrpc. */
export interface SobaRequester {
  request<M extends RequestMethod>(method: M, params: ParamsOf<M>): Promise<ResultOf<M>>;
}
