// Errors a client sees: the daemon's JSON-RPC errors, and a connection that ends.

/** The daemon's stable error codes (docs/protocol.md, "Errors"). */
export const ErrorCode = {
  ParseError: -32700,
  InvalidRequest: -32600,
  MethodNotFound: -32601,
  InvalidParams: -32602,
  Internal: -32603,
  /** The input cannot be brought under the hard limit; `data.compaction` says why. Send nothing. */
  BudgetExceeded: -32001,
  /** No such session (or no active session in the workspace). */
  UnknownSession: -32002,
  /** The turn's one overflow retry is used; `data.compaction` says how it ended. */
  OverflowRetryUsed: -32003,
  /** Another process writes the session log. */
  SessionLocked: -32004,
  /** Compact, capsule load or rewind of a session whose agent compacts it itself: nothing changed. */
  AgentCompacts: -32005,
  /** A client's answer to a request the daemon sent it (`soba/summarize`) that failed. */
  RequestFailed: -32803,
} as const;

/** An error answer from the daemon. */
export class SobaError extends Error {
  constructor(
    readonly method: string,
    readonly code: number,
    message: string,
    readonly data?: unknown,
  ) {
    super(`${method}: ${message}`);
    this.name = 'SobaError';
  }
}

/** The connection ended (or could not start) before the answer came. */
export class SobaConnectionError extends Error {
  constructor(
    message: string,
    /** Why the connection ended, without the request's name (`soba serve` exited with code 1: …). */
    readonly reason: string = message,
  ) {
    super(message);
    this.name = 'SobaConnectionError';
  }
}
