// The SOBA JSON-RPC protocol as the editor uses it. The message types are the SDK's, generated
// from the daemon's schemas (sdk/ts/src/protocol.ts from schemas/protocol/), so they cannot
// drift from what the daemon sends; esbuild bundles what is used of them into the extension.
// Only the editor's own helpers are declared here, in terms of those types.
// Pure declarations: no `vscode` import, so the unit tests and the protocol test can use it.

import type { MethodName, Methods, NotificationName, PreviewParams } from '../../../sdk/ts/src/protocol';

export type {
  BudgetReport,
  CapsuleSummary,
  CompactionNotification,
  CompactionResult,
  ContextResult,
  Control,
  FlightRecord,
  LastCompaction,
  MeasurementSource,
  Outcome,
  PreviewResult,
  Quality,
  SessionClosedNotification,
  SessionSummary,
} from '../../../sdk/ts/src/protocol';
export { ErrorCode } from '../../../sdk/ts/src/errors';

export type RequestMethod = MethodName;
export type ParamsOf<M extends RequestMethod> = Methods[M]['params'];
export type ResultOf<M extends RequestMethod> = Methods[M]['result'];

/** Which session an editor-side request is about: omitted fields mean the workspace's active session. */
export interface SessionTarget {
  sessionId?: string;
  workspace?: string;
}

/** What `soba/preview` is asked to show: its params without the session target, per action. */
export type PreviewAction = PreviewParams extends infer P ? (P extends unknown ? Omit<P, keyof SessionTarget> : never) : never;

export const BUDGET_CHANGED = 'soba/budgetChanged' satisfies NotificationName;
export const COMPACTION = 'soba/compaction' satisfies NotificationName;
export const SESSION_CLOSED = 'soba/session/closed' satisfies NotificationName;
/** The LSP notification the daemon sends its warnings with. */
export const SHOW_MESSAGE = 'window/showMessage';

/** Sends one typed request; implemented over vscode-languageclient or vscode-jsonrpc. */
export interface SobaRequester {
  request<M extends RequestMethod>(method: M, params: ParamsOf<M>): Promise<ResultOf<M>>;
}
