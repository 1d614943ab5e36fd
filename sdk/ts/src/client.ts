// A typed client for the SOBA daemon over JSON-RPC 2.0 with LSP framing: `soba serve` as a
// child process (SobaClient.spawn) or any pair of byte streams (SobaClient.connect).

import { spawn, type ChildProcess } from 'node:child_process';
import type { Readable, Writable } from 'node:stream';
import { pathToFileURL } from 'node:url';

import { SobaConnectionError, SobaError, ErrorCode } from './errors';
import { encodeFrame, FrameReader } from './framing';
import type {
  ClientMethodName,
  ClientMethods,
  MethodName,
  Methods,
  NotificationName,
  Notifications,
  SummarizeCapability,
  SummarizeParams,
  SummarizeResult,
} from './protocol';

/**
 * Runs the daemon's summarization prompts (`soba/summarize`) on the agent's own model. `signal`
 * aborts when the daemon stops waiting (`$/cancelRequest`: its compaction timed out or was
 * cancelled). A thrown error's message goes back to the daemon (never put a key in it); a
 * numeric `status` on it, the provider's HTTP status, goes along as `error.data.status`.
 */
export type Summarize = (params: SummarizeParams, signal: AbortSignal) => Promise<SummarizeResult>;

/** Serves one kind of request the daemon sends the client; `signal` aborts on `$/cancelRequest`. */
export type RequestHandler<M extends ClientMethodName> = (
  params: ClientMethods[M]['params'],
  signal: AbortSignal,
) => Promise<ClientMethods[M]['result']>;

export interface ConnectOptions {
  /** Workspace folders (absolute paths): the first is the default workspace of editor-side requests. */
  workspaceFolders?: string[];
  /** Ask for `$/progress` work-done progress while compactions run. */
  workDoneProgress?: boolean;
  /** Name reported in `initialize`. */
  clientName?: string;
  /**
   * Offer the agent's own model for capsules: declared at `initialize`, so the daemon sends
   * `soba/summarize` for the compactions this client's requests start (docs/protocol.md).
   */
  summarize?: Summarize;
  /** What the offer says about that model (`model`, `contextWindow`, `maxOutputTokens`). */
  summarizeOffer?: SummarizeCapability;
  /**
   * Deadline of each request, in milliseconds. A daemon that has not answered by then is taken
   * as hung: every pending request fails with SobaConnectionError, and a spawned `soba serve`
   * is stopped. Default: no deadline.
   */
  requestTimeoutMs?: number;
}

export interface SpawnOptions extends ConnectOptions {
  /** The `soba` executable: default `$SOBA_BIN`, else `soba` on `PATH`. */
  bin?: string;
  /** Arguments after `serve`, e.g. `['--standalone']` or `['--config', file]`. */
  args?: string[];
  env?: NodeJS.ProcessEnv;
  cwd?: string;
  /**
   * Let this process exit while the connection sits idle: `soba serve` and its pipes do not
   * keep the event loop alive (a pending request with a deadline still does).
   */
  unref?: boolean;
  /**
   * How long `close()` waits for `soba serve` to exit on its closed stdin before SIGTERM
   * (SIGKILL follows 2 s later). Default 5000.
   */
  exitGraceMs?: number;
}

type Pending = { method: string; resolve: (v: unknown) => void; reject: (e: Error) => void };
type Handler = (params: unknown) => void;
type AnyRequestHandler = (params: unknown, signal: AbortSignal) => Promise<unknown>;

/** The `window/showMessage` notification the daemon sends when a degraded fallback was used. */
export interface ShowMessage {
  type: number;
  message: string;
}

const STDERR_TAIL_BYTES = 4096;
const DEFAULT_EXIT_GRACE_MS = 5000;
/** How long a stopped `soba serve` has between SIGTERM and SIGKILL. */
const KILL_GRACE_MS = 2000;

export class SobaClient {
  private nextId = 1;
  private readonly pending = new Map<number, Pending>();
  private readonly handlers = new Map<string, Set<Handler>>();
  private readonly requestHandlers = new Map<string, AnyRequestHandler>();
  /** The daemon's requests being served, by id, to abort on `$/cancelRequest`. */
  private readonly serving = new Map<string, AbortController>();
  private closedReason: string | undefined;
  private stderrTail = '';
  private readonly requestTimeoutMs: number | undefined;
  private readonly exitGraceMs: number;
  /** Settles once a spawned `soba serve` has exited (or could not start); at once without one. */
  private readonly exited: Promise<void>;
  /** `serverInfo` from `initialize`: `{ name: 'soba', version }`. */
  serverInfo: { name: string; version?: string } | undefined;
  /** The whole `initialize` result (capabilities: the `soba.server.*` commands). */
  initializeResult: unknown;

  private constructor(
    input: Readable,
    private readonly output: Writable,
    options: SpawnOptions,
    private readonly child?: ChildProcess,
  ) {
    this.requestTimeoutMs = options.requestTimeoutMs;
    this.exitGraceMs = options.exitGraceMs ?? DEFAULT_EXIT_GRACE_MS;
    if (options.summarize) this.requestHandlers.set('soba/summarize', options.summarize as AnyRequestHandler);
    const reader = new FrameReader();
    input.on('data', (chunk: Buffer) => {
      let messages: unknown[];
      try {
        messages = reader.push(chunk);
      } catch (e) {
        this.fail(`unreadable data from the daemon: ${(e as Error).message}`);
        return;
      }
      for (const m of messages) this.dispatch(m as Record<string, unknown>);
    });
    input.on('error', (e) => this.fail(`reading from the daemon failed: ${e.message}`));
    let inputClosed = false;
    input.on('close', () => {
      inputClosed = true;
      if (!child) return this.fail('the daemon closed the connection');
      // The child's exit says why; one that closed its output and lives on is as good as gone.
      if (this.running) setTimeout(() => this.fail('the daemon closed the connection'), 1000).unref();
    });
    if (!child) {
      this.exited = Promise.resolve();
      output.on('error', (e) => this.fail(`writing to the daemon failed: ${e.message}`));
      return;
    }
    this.exited = new Promise((resolve) => {
      child.once('exit', () => resolve());
      child.once('error', () => resolve());
    });
    // Write errors (EPIPE once the child is gone) are reported by its exit.
    output.on('error', () => {});
    const command = `\`${child.spawnfile} serve\``;
    child.stderr?.on('data', (chunk: Buffer) => {
      this.stderrTail = (this.stderrTail + chunk.toString('utf8')).slice(-STDERR_TAIL_BYTES);
    });
    child.on('error', (e) => this.fail(`cannot start ${command}: ${e.message}`));
    child.on('exit', (code, signal) => {
      const said = this.stderrTail.trim();
      const why = `${command} ${signal ? `was killed by ${signal}` : `exited with code ${code}`}${said ? `: ${said}` : ''}`;
      // Answers written before the exit are still in the pipe: fail once it is drained.
      if (inputClosed) return this.fail(why, false);
      input.once('close', () => this.fail(why, false));
      setTimeout(() => this.fail(why, false), 1000).unref();
    });
    // `soba serve` never outlives this process, however it ends (process.exit, an uncaught error).
    const stopWithProcess = () => this.stop();
    process.once('exit', stopWithProcess);
    void this.exited.then(() => process.off('exit', stopWithProcess));
    if (options.unref) {
      child.unref();
      for (const s of [child.stdin, child.stdout, child.stderr]) (s as unknown as { unref?: () => void } | null)?.unref?.();
    }
  }

  /** Start `soba serve` and initialize a connection to it. */
  static async spawn(options: SpawnOptions = {}): Promise<SobaClient> {
    const bin = options.bin ?? process.env.SOBA_BIN ?? 'soba';
    const child = spawn(bin, ['serve', ...(options.args ?? [])], {
      env: options.env ?? process.env,
      cwd: options.cwd,
      stdio: ['pipe', 'pipe', 'pipe'],
    });
    const client = new SobaClient(child.stdout!, child.stdin!, options, child);
    try {
      await client.initialize(options);
    } catch (e) {
      client.fail('initialize failed');
      throw e;
    }
    return client;
  }

  /** Initialize a connection over existing streams (a socket, a child you started yourself). */
  static async connect(input: Readable, output: Writable, options: ConnectOptions = {}): Promise<SobaClient> {
    const client = new SobaClient(input, output, options);
    await client.initialize(options);
    return client;
  }

  private async initialize(options: ConnectOptions): Promise<void> {
    const folders = (options.workspaceFolders ?? []).map((f) => ({
      uri: pathToFileURL(f).href,
      name: f.split('/').filter(Boolean).pop() ?? f,
    }));
    const result = (await this.send('initialize', {
      processId: process.pid,
      clientInfo: { name: options.clientName ?? '@soba/sdk' },
      rootUri: null,
      capabilities: {
        window: { workDoneProgress: options.workDoneProgress ?? false },
        ...(options.summarize ? { experimental: { soba: { summarize: options.summarizeOffer ?? {} } } } : {}),
      },
      workspaceFolders: folders,
    })) as { serverInfo?: { name: string; version?: string } };
    this.serverInfo = result.serverInfo;
    this.initializeResult = result;
    this.write({ jsonrpc: '2.0', method: 'initialized', params: {} });
  }

  /** Any `soba/*` request, typed by its method name. */
  request<M extends MethodName>(method: M, params: Methods[M]['params']): Promise<Methods[M]['result']> {
    return this.send(method, params) as Promise<Methods[M]['result']>;
  }

  /** Listen to a `soba/*` notification; returns a function that stops listening. */
  on<N extends NotificationName>(method: N, handler: (params: Notifications[N]) => void): () => void {
    return this.onNotification(method, handler as Handler);
  }

  /** Listen to any notification by name (`$/progress`, `window/showMessage`, …). */
  onNotification(method: string, handler: (params: unknown) => void): () => void {
    let set = this.handlers.get(method);
    if (!set) this.handlers.set(method, (set = new Set()));
    set.add(handler);
    return () => set!.delete(handler);
  }

  /**
   * Serve a request the daemon sends the client (`soba/summarize`: see the `summarize` option,
   * which also offers it at `initialize`); returns a function that stops serving it.
   */
  onRequest<M extends ClientMethodName>(method: M, handler: RequestHandler<M>): () => void {
    this.requestHandlers.set(method, handler as AnyRequestHandler);
    return () => {
      if (this.requestHandlers.get(method) === handler) this.requestHandlers.delete(method);
    };
  }

  /** False once the connection has failed or been closed: every request then fails at once. */
  get alive(): boolean {
    return this.closedReason === undefined;
  }

  /** The process id of a spawned `soba serve`. */
  get pid(): number | undefined {
    return this.child?.pid;
  }

  /** Warnings the daemon shows (a degraded capsule, file watching fell back to polling). */
  onShowMessage(handler: (message: ShowMessage) => void): () => void {
    return this.onNotification('window/showMessage', handler as Handler);
  }

  // Agent side ---------------------------------------------------------------------------

  openSession(params: Methods['soba/session/open']['params']) {
    return this.request('soba/session/open', params);
  }
  append(params: Methods['soba/session/append']['params']) {
    return this.request('soba/session/append', params);
  }
  /** Call immediately before every inference and send exactly `messages`. */
  preflight(params: Methods['soba/preflight']['params']) {
    return this.request('soba/preflight', params);
  }
  turnComplete(params: Methods['soba/turn/complete']['params']) {
    return this.request('soba/turn/complete', params);
  }
  checkpoint(params: Methods['soba/checkpoint']['params']) {
    return this.request('soba/checkpoint', params);
  }
  /** The provider rejected the request as too long: one recovery compaction for the turn. */
  overflow(params: Methods['soba/overflow']['params']) {
    return this.request('soba/overflow', params);
  }
  cancel(params: Methods['soba/cancel']['params']) {
    return this.request('soba/cancel', params);
  }
  rewind(params: Methods['soba/rewind']['params']) {
    return this.request('soba/rewind', params);
  }
  closeSession(params: Methods['soba/session/close']['params']) {
    return this.request('soba/session/close', params);
  }

  // Editor side --------------------------------------------------------------------------

  budget(params: Methods['soba/budget']['params'] = {}) {
    return this.request('soba/budget', params);
  }
  /** What fills the context window: by part, by kind, the largest entries, the capsule in force. */
  context(params: Methods['soba/context']['params'] = {}) {
    return this.request('soba/context', params);
  }
  compact(params: Methods['soba/compact']['params'] = {}) {
    return this.request('soba/compact', params);
  }
  autoCompact(params: Methods['soba/autoCompact']['params']) {
    return this.request('soba/autoCompact', params);
  }
  sessions(params: Methods['soba/sessions']['params'] = {}) {
    return this.request('soba/sessions', params);
  }
  flight(params: Methods['soba/flight']['params'] = {}) {
    return this.request('soba/flight', params);
  }
  capsuleCreate(params: Methods['soba/capsule/create']['params']) {
    return this.request('soba/capsule/create', params);
  }
  capsuleExport(params: Methods['soba/capsule/export']['params']) {
    return this.request('soba/capsule/export', params);
  }
  capsuleLoad(params: Methods['soba/capsule/load']['params']) {
    return this.request('soba/capsule/load', params);
  }
  capsuleList(params: Methods['soba/capsule/list']['params'] = {}) {
    return this.request('soba/capsule/list', params);
  }
  /** Follow a live agent transcript (Claude Code, Codex, pi) into a session of the workspace. */
  attach(params: Methods['soba/attach']['params']) {
    return this.request('soba/attach', params);
  }
  /** What SOBA would send after a compact, capsule load or rewind, changing nothing. */
  preview(params: Methods['soba/preview']['params']) {
    return this.request('soba/preview', params);
  }

  /**
   * `shutdown` and `exit`, then the end of `soba serve`'s stdin, on which it exits; one still
   * there after `exitGraceMs` is stopped (SIGTERM, then SIGKILL). Resolves once it has exited.
   */
  async close(): Promise<void> {
    if (this.closedReason === undefined) {
      try {
        await this.send('shutdown', null);
        this.write({ jsonrpc: '2.0', method: 'exit' });
      } catch {
        // Already gone: nothing left to shut down.
      }
      this.output.end();
      await this.waitForExit(this.exitGraceMs);
    }
    this.fail('the client closed the connection');
    await this.waitForExit(KILL_GRACE_MS + 1000);
  }

  private get running(): boolean {
    const child = this.child;
    return !!child && child.pid !== undefined && child.exitCode === null && child.signalCode === null;
  }

  /** SIGTERM a spawned `soba serve`, and SIGKILL it when it is still there after KILL_GRACE_MS. */
  private stop(): void {
    if (!this.running) return;
    const child = this.child!;
    child.kill('SIGTERM');
    const escalate = setTimeout(() => {
      if (this.running) child.kill('SIGKILL');
    }, KILL_GRACE_MS);
    escalate.unref();
    void this.exited.then(() => clearTimeout(escalate));
  }

  /** Wait for a spawned `soba serve` to exit, at most `ms`. */
  private async waitForExit(ms: number): Promise<void> {
    let timer: NodeJS.Timeout | undefined;
    const late = new Promise<void>((resolve) => {
      timer = setTimeout(resolve, ms);
    });
    try {
      await Promise.race([this.exited, late]);
    } finally {
      clearTimeout(timer);
    }
  }

  private send(method: string, params: unknown): Promise<unknown> {
    if (this.closedReason !== undefined) {
      return Promise.reject(new SobaConnectionError(`${method}: ${this.closedReason}`, this.closedReason));
    }
    const id = this.nextId++;
    const deadline = this.requestTimeoutMs;
    return new Promise((resolve, reject) => {
      const timer =
        deadline === undefined
          ? undefined
          : setTimeout(() => {
              const from = this.child ? `\`${this.child.spawnfile} serve\`` : 'the daemon';
              this.fail(`no answer to ${method} within ${deadline / 1000}s from ${from}`);
            }, deadline);
      this.pending.set(id, {
        method,
        resolve: (v) => {
          clearTimeout(timer);
          resolve(v);
        },
        reject: (e) => {
          clearTimeout(timer);
          reject(e);
        },
      });
      this.write({ jsonrpc: '2.0', id, method, params });
    });
  }

  private write(message: unknown): void {
    if (this.output.writableEnded || this.output.destroyed) return;
    this.output.write(encodeFrame(message));
  }

  /** Answer the daemon's request `id` with `handler`'s result, or its failure as an error. */
  private serve(id: number | string, params: unknown, handler: AnyRequestHandler): void {
    const key = String(id);
    const abort = new AbortController();
    this.serving.set(key, abort);
    // Called at once, so that a `$/cancelRequest` right behind the request finds its listener.
    let answer: Promise<unknown>;
    try {
      answer = Promise.resolve(handler(params, abort.signal));
    } catch (e) {
      answer = Promise.reject(e);
    }
    answer
      .then(
        (result) => this.write({ jsonrpc: '2.0', id, result }),
        (e: unknown) => {
          const err = e as { message?: unknown; status?: unknown } | null;
          const status = typeof err?.status === 'number' ? err.status : undefined;
          this.write({
            jsonrpc: '2.0',
            id,
            error: {
              code: ErrorCode.RequestFailed,
              message: typeof err?.message === 'string' ? err.message : String(e),
              ...(status !== undefined ? { data: { status } } : {}),
            },
          });
        },
      )
      .finally(() => this.serving.delete(key));
  }

  private dispatch(m: Record<string, unknown>): void {
    const method = typeof m.method === 'string' ? m.method : undefined;
    if (method === undefined && (typeof m.id === 'number' || typeof m.id === 'string')) {
      const p = this.pending.get(m.id as number);
      if (!p) return;
      this.pending.delete(m.id as number);
      const error = m.error as { code: number; message: string; data?: unknown } | undefined;
      if (error) p.reject(new SobaError(p.method, error.code, error.message, error.data));
      else p.resolve(m.result);
      return;
    }
    if (method === undefined) return;
    if (m.id !== undefined) {
      // A request from the daemon: progress tokens are accepted, the ones with a handler served,
      // anything else refused.
      const handler = this.requestHandlers.get(method);
      if (method === 'window/workDoneProgress/create') {
        this.write({ jsonrpc: '2.0', id: m.id, result: null });
      } else if (handler && (typeof m.id === 'number' || typeof m.id === 'string')) {
        this.serve(m.id, m.params, handler);
      } else {
        this.write({
          jsonrpc: '2.0',
          id: m.id,
          error: { code: ErrorCode.MethodNotFound, message: `the client does not handle ${method}` },
        });
      }
      return;
    }
    if (method === '$/cancelRequest') {
      this.serving.get(String((m.params as { id?: unknown } | undefined)?.id))?.abort();
    }
    for (const h of this.handlers.get(method) ?? []) h(m.params);
  }

  /**
   * The connection is over: pending requests fail, requests being served are aborted, and a
   * spawned `soba serve` is stopped. `withStderr`: add what it wrote on stderr to the reason.
   */
  private fail(reason: string, withStderr = true): void {
    if (this.closedReason !== undefined) return;
    const stderr = withStderr ? this.stderrTail.trim() : '';
    this.closedReason = stderr ? `${reason}; its stderr ends with: ${stderr}` : reason;
    for (const [, p] of this.pending) {
      p.reject(new SobaConnectionError(`${p.method}: ${this.closedReason} before answering`, this.closedReason));
    }
    this.pending.clear();
    for (const a of this.serving.values()) a.abort();
    this.serving.clear();
    this.stop();
  }
}
