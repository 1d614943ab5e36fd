// A typed client for the SOBA daemon over JSON-RPC 2.0 with LSP framing: `soba serve` as a
// child process (SobaClient.spawn) or any pair of byte streams (SobaClient.connect).

import { spawn, type ChildProcess } from 'node:child_process';
import type { Readable, Writable } from 'node:stream';

import { SobaConnectionError, SobaError, ErrorCode } from './errors';
import { encodeFrame, FrameReader } from './framing';
import type { MethodName, Methods, NotificationName, Notifications } from './protocol';

export interface ConnectOptions {
  /** Workspace folders (absolute paths): the first is the default workspace of editor-side requests. */
  workspaceFolders?: string[];
  /** Ask for `$/progress` work-done progress while compactions run. */
  workDoneProgress?: boolean;
  /** Name reported in `initialize`. */
  clientName?: string;
}

export interface SpawnOptions extends ConnectOptions {
  /** The `soba` executable: default `$SOBA_BIN`, else `soba` on `PATH`. */
  bin?: string;
  /** Arguments after `serve`, e.g. `['--standalone']` or `['--config', file]`. */
  args?: string[];
  env?: NodeJS.ProcessEnv;
  cwd?: string;
}

type Pending = { method: string; resolve: (v: unknown) => void; reject: (e: Error) => void };
type Handler = (params: unknown) => void;

/** The `window/showMessage` notification the daemon sends when a degraded fallback was used. */
export interface ShowMessage {
  type: number;
  message: string;
}

const STDERR_TAIL_BYTES = 4096;

export class SobaClient {
  private nextId = 1;
  private readonly pending = new Map<number, Pending>();
  private readonly handlers = new Map<string, Set<Handler>>();
  private closedReason: string | undefined;
  private stderrTail = '';
  /** `serverInfo` from `initialize`: `{ name: 'soba', version }`. */
  serverInfo: { name: string; version?: string } | undefined;
  /** The whole `initialize` result (capabilities: the `soba.server.*` commands). */
  initializeResult: unknown;

  private constructor(
    input: Readable,
    private readonly output: Writable,
    private readonly child?: ChildProcess,
  ) {
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
    input.on('close', () => this.fail('the daemon closed the connection'));
    input.on('error', (e) => this.fail(`reading from the daemon failed: ${e.message}`));
    output.on('error', (e) => this.fail(`writing to the daemon failed: ${e.message}`));
    child?.stderr?.on('data', (chunk: Buffer) => {
      this.stderrTail = (this.stderrTail + chunk.toString('utf8')).slice(-STDERR_TAIL_BYTES);
    });
    child?.on('error', (e) => this.fail(`cannot run ${child.spawnfile}: ${e.message}; set SOBA_BIN or pass { bin }`));
    child?.on('exit', (code, signal) => {
      // Answers written before the exit are still in the pipe: fail once it is drained.
      const why = `soba serve exited (${signal ? `signal ${signal}` : `code ${code}`})`;
      input.once('close', () => this.fail(why));
      setTimeout(() => this.fail(why), 1000).unref();
    });
  }

  /** Start `soba serve` and initialize a connection to it. */
  static async spawn(options: SpawnOptions = {}): Promise<SobaClient> {
    const bin = options.bin ?? process.env.SOBA_BIN ?? 'soba';
    const child = spawn(bin, ['serve', ...(options.args ?? [])], {
      env: options.env ?? process.env,
      cwd: options.cwd,
      stdio: ['pipe', 'pipe', 'pipe'],
    });
    const client = new SobaClient(child.stdout!, child.stdin!, child);
    try {
      await client.initialize(options);
    } catch (e) {
      child.kill();
      throw e;
    }
    return client;
  }

  /** Initialize a connection over existing streams (a socket, a child you started yourself). */
  static async connect(input: Readable, output: Writable, options: ConnectOptions = {}): Promise<SobaClient> {
    const client = new SobaClient(input, output);
    await client.initialize(options);
    return client;
  }

  private async initialize(options: ConnectOptions): Promise<void> {
    const folders = (options.workspaceFolders ?? []).map((f) => ({
      uri: `file://${encodeURI(f)}`,
      name: f.split('/').filter(Boolean).pop() ?? f,
    }));
    const result = (await this.send('initialize', {
      processId: process.pid,
      clientInfo: { name: options.clientName ?? '@soba/sdk' },
      rootUri: null,
      capabilities: { window: { workDoneProgress: options.workDoneProgress ?? false } },
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

  /** `shutdown` and `exit`; waits for a spawned `soba serve` to end. */
  async close(): Promise<void> {
    if (this.closedReason === undefined) {
      try {
        await this.send('shutdown', null);
        this.write({ jsonrpc: '2.0', method: 'exit' });
      } catch {
        // Already gone: nothing left to shut down.
      }
    }
    this.output.end();
    const child = this.child;
    if (child && child.exitCode === null && child.signalCode === null) {
      await new Promise<void>((resolve) => {
        const timer = setTimeout(() => child.kill(), 5000);
        child.once('exit', () => {
          clearTimeout(timer);
          resolve();
        });
      });
    }
    this.fail('the client closed the connection');
  }

  private send(method: string, params: unknown): Promise<unknown> {
    if (this.closedReason !== undefined) {
      return Promise.reject(new SobaConnectionError(`${method}: ${this.closedReason}`));
    }
    const id = this.nextId++;
    return new Promise((resolve, reject) => {
      this.pending.set(id, { method, resolve, reject });
      this.write({ jsonrpc: '2.0', id, method, params });
    });
  }

  private write(message: unknown): void {
    this.output.write(encodeFrame(message));
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
      // A request from the daemon: progress tokens are accepted, anything else is not served here.
      if (method === 'window/workDoneProgress/create') {
        this.write({ jsonrpc: '2.0', id: m.id, result: null });
      } else {
        this.write({
          jsonrpc: '2.0',
          id: m.id,
          error: { code: ErrorCode.MethodNotFound, message: `the client does not handle ${method}` },
        });
      }
      return;
    }
    for (const h of this.handlers.get(method) ?? []) h(m.params);
  }

  private fail(reason: string): void {
    if (this.closedReason !== undefined) return;
    const stderr = this.stderrTail.trim();
    this.closedReason = stderr ? `${reason}; its stderr ends with: ${stderr}` : reason;
    for (const [, p] of this.pending) {
      p.reject(new SobaConnectionError(`${p.method}: ${this.closedReason} before answering`));
    }
    this.pending.clear();
  }
}
