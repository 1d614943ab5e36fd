// A connection to the SOBA daemon: `soba serve` as a child process, JSON-RPC with LSP framing
// over its stdio, every request under a deadline. Any failure of the child (not installed,
// exited, silent) fails the pending requests with SobaUnavailable and never throws elsewhere.
import { spawn, type ChildProcess } from 'node:child_process';
import { pathToFileURL } from 'node:url';
import { encode, FrameReader } from './framing.js';

/** SOBA cannot answer: not installed, exited, or too slow. pi then compacts on its own. */
export class SobaUnavailable extends Error {}

/** An error answer of the daemon (docs/protocol.md, "Errors"). */
export class SobaError extends Error {
  constructor(
    readonly code: number,
    message: string,
  ) {
    super(message);
  }
}

/** Params of the daemon's `soba/summarize` request (schemas/protocol/client/). */
export interface SummarizeParams {
  sessionId: string;
  operationId: string;
  system: string;
  user: string;
  maxOutputTokens: number;
  model?: string;
}

/** The answer to `soba/summarize`. */
export interface SummarizeResult {
  text: string;
  hitOutputLimit?: boolean;
}

/**
 * Runs the daemon's summarization prompts on the agent's own model. `signal` aborts when the
 * daemon stops waiting (`$/cancelRequest`: its compaction timed out or was cancelled). A thrown
 * error's message is sent back (never put a key in it); a numeric `status` on it is the
 * provider's HTTP status.
 */
export type Summarize = (params: SummarizeParams, signal: AbortSignal) => Promise<SummarizeResult>;

export interface ConnectOptions {
  /** The `soba` executable. */
  bin: string;
  /** The workspace the agent works in (pi's cwd). */
  workspace: string;
  /** Deadline of each request, in milliseconds. */
  timeoutMs: number;
  env?: NodeJS.ProcessEnv;
  /** Offer the daemon the agent's model for capsules (docs/protocol.md, `soba/summarize`). */
  summarize?: Summarize;
}

interface Pending {
  resolve: (value: unknown) => void;
  reject: (error: Error) => void;
}

const STDERR_KEPT = 2000;
/** How long a closing daemon connection may take to exit by itself once its stdin is closed. */
const EXIT_GRACE_MS = 1000;
/** How long a stopped daemon connection has between SIGTERM and SIGKILL. */
const KILL_GRACE_MS = 2000;
const METHOD_NOT_FOUND = -32601;
const REQUEST_FAILED = -32803;

export class SobaConnection {
  private closed: string | undefined;
  private stderr = '';
  private nextId = 1;
  private readonly pending = new Map<number, Pending>();
  /** The daemon's requests being answered, by id, to abort on `$/cancelRequest`. */
  private readonly serving = new Map<string, AbortController>();
  /** Settles once the child has exited (or could not start). */
  private readonly exited: Promise<void>;

  private constructor(
    private readonly child: ChildProcess,
    private readonly bin: string,
    private readonly timeoutMs: number,
    private readonly summarize: Summarize | undefined,
  ) {
    this.exited = new Promise((resolve) => {
      child.once('exit', () => resolve());
      child.once('error', () => resolve());
    });
    // pi may end its process without a word to its extensions (process.exit after an error, a
    // second Ctrl+C): the child goes with it rather than outliving pi.
    const stopWithPi = () => this.stop();
    process.once('exit', stopWithPi);
    void this.exited.then(() => process.off('exit', stopWithPi));
  }

  /** Start `soba serve` and initialize the connection, or throw SobaUnavailable saying why. */
  static async connect(o: ConnectOptions): Promise<SobaConnection> {
    const child = spawn(o.bin, ['serve'], { env: o.env ?? process.env, stdio: ['pipe', 'pipe', 'pipe'] });
    const c = new SobaConnection(child, o.bin, o.timeoutMs, o.summarize);
    const reader = new FrameReader(
      (m) => c.dispatch(m),
      (why) => c.fail(`the SOBA daemon sent ${why}`),
    );
    child.stdout!.on('data', (chunk: Buffer) => reader.push(chunk));
    child.stderr!.setEncoding('utf8');
    child.stderr!.on('data', (d: string) => {
      c.stderr = (c.stderr + d).slice(-STDERR_KEPT);
    });
    child.on('error', (e) => c.fail(`cannot start \`${o.bin} serve\`: ${e.message}`));
    child.on('exit', (code, signal) => {
      const how = signal ? `was killed by ${signal}` : `exited with code ${code}`;
      const said = c.stderr.trim();
      c.fail(`\`${o.bin} serve\` ${how}${said ? `: ${said}` : ''}`);
    });
    // Write errors (EPIPE once the child is gone) are reported by `exit`.
    child.stdin!.on('error', () => {});
    // A pi run must be able to end while the daemon connection sits idle.
    child.unref();
    for (const s of [child.stdin, child.stdout, child.stderr]) {
      (s as unknown as { unref?: () => void }).unref?.();
    }
    const root = pathToFileURL(o.workspace).href;
    await c.request('initialize', {
      processId: process.pid,
      rootUri: root,
      capabilities: o.summarize ? { experimental: { soba: { summarize: {} } } } : {},
      clientInfo: { name: 'pi' },
      workspaceFolders: [{ uri: root, name: 'pi' }],
    });
    c.send({ jsonrpc: '2.0', method: 'initialized', params: {} });
    return c;
  }

  get alive(): boolean {
    return this.closed === undefined;
  }

  /** The process id of `soba serve`, once started. */
  get pid(): number | undefined {
    return this.child.pid;
  }

  private send(message: object): void {
    if (this.closed !== undefined || !this.child.stdin?.writable) return;
    this.child.stdin.write(encode(message));
  }

  private dispatch(m: unknown): void {
    if (typeof m !== 'object' || m === null) return;
    const msg = m as {
      id?: number | string | null;
      method?: string;
      params?: unknown;
      result?: unknown;
      error?: { code: number; message: string };
    };
    if (typeof msg.method === 'string') {
      if (msg.id === undefined || msg.id === null) {
        if (msg.method === '$/cancelRequest') {
          const id = (msg.params as { id?: unknown } | undefined)?.id;
          this.serving.get(String(id))?.abort();
        }
        // Other notifications are of no use here.
        return;
      }
      if (msg.method === 'soba/summarize' && this.summarize) {
        this.serve(msg.id, msg.params as SummarizeParams, this.summarize);
        return;
      }
      // Requests we do not take get a polite refusal.
      this.send({ jsonrpc: '2.0', id: msg.id, error: { code: METHOD_NOT_FOUND, message: `not handled: ${msg.method}` } });
      return;
    }
    if (typeof msg.id !== 'number') return;
    const p = this.pending.get(msg.id);
    if (!p) return;
    this.pending.delete(msg.id);
    if (msg.error) p.reject(new SobaError(msg.error.code, msg.error.message));
    else p.resolve(msg.result ?? null);
  }

  /** Answer the daemon's `soba/summarize` with the agent's model. */
  private serve(id: number | string, params: SummarizeParams, summarize: Summarize): void {
    const key = String(id);
    const abort = new AbortController();
    this.serving.set(key, abort);
    summarize(params, abort.signal).then(
      (result) => this.send({ jsonrpc: '2.0', id, result }),
      (e: unknown) => {
        const err = e as { message?: string; status?: unknown };
        const status = typeof err?.status === 'number' ? err.status : undefined;
        this.send({
          jsonrpc: '2.0',
          id,
          error: {
            code: REQUEST_FAILED,
            message: err?.message ?? String(e),
            ...(status !== undefined ? { data: { status } } : {}),
          },
        });
      },
    ).finally(() => this.serving.delete(key));
  }

  private fail(why: string): void {
    if (this.closed !== undefined) return;
    this.closed = why;
    for (const p of this.pending.values()) p.reject(new SobaUnavailable(why));
    this.pending.clear();
    for (const a of this.serving.values()) a.abort();
    this.serving.clear();
    this.stop();
  }

  private get running(): boolean {
    return this.child.pid !== undefined && this.child.exitCode === null && this.child.signalCode === null;
  }

  /** SIGTERM the child, and SIGKILL it when it is still there after KILL_GRACE_MS. */
  private stop(): void {
    if (!this.running) return;
    this.child.kill('SIGTERM');
    const escalate = setTimeout(() => {
      if (this.running) this.child.kill('SIGKILL');
    }, KILL_GRACE_MS);
    // A pi run that is over does not wait for it: the child also ends on its stdin closing.
    escalate.unref();
    void this.exited.then(() => clearTimeout(escalate));
  }

  /** Wait for the child to exit, at most `ms`; true when it did. */
  private async waitForExit(ms: number): Promise<boolean> {
    let timer: NodeJS.Timeout | undefined;
    const late = new Promise<false>((resolve) => {
      timer = setTimeout(() => resolve(false), ms);
    });
    try {
      return await Promise.race([this.exited.then(() => true as const), late]);
    } finally {
      clearTimeout(timer);
    }
  }

  /**
   * A request answered within the deadline. An error answer is a SobaError (`code`, `message`);
   * a dead or silent daemon is SobaUnavailable, and the connection is then closed.
   */
  request<T>(method: string, params?: object): Promise<T> {
    if (this.closed !== undefined) return Promise.reject(new SobaUnavailable(this.closed));
    const id = this.nextId++;
    return new Promise<T>((resolve, reject) => {
      const timer = setTimeout(
        () => this.fail(`no answer to ${method} within ${this.timeoutMs / 1000}s from \`${this.bin} serve\``),
        this.timeoutMs,
      );
      this.pending.set(id, {
        resolve: (v) => {
          clearTimeout(timer);
          resolve(v as T);
        },
        reject: (e) => {
          clearTimeout(timer);
          reject(e);
        },
      });
      this.send({ jsonrpc: '2.0', id, method, ...(params === undefined ? {} : { params }) });
    });
  }

  /** A request whose answer does not matter (soba/cancel of an aborted compaction). */
  fireAndForget(method: string, params: object): void {
    this.request(method, params).catch(() => {});
  }

  /**
   * Shut down politely (so the shared daemon lets this client go) and close the child's stdin,
   * on which `soba serve` exits; a child still there after EXIT_GRACE_MS is killed. Resolves
   * once the child has exited (SIGKILL included).
   */
  async close(): Promise<void> {
    if (this.closed === undefined) {
      await this.request('shutdown').catch(() => {});
      this.send({ jsonrpc: '2.0', method: 'exit' });
      this.child.stdin?.end();
      await this.waitForExit(EXIT_GRACE_MS);
    }
    this.fail('the connection to the SOBA daemon was closed');
    await this.waitForExit(KILL_GRACE_MS + EXIT_GRACE_MS);
  }
}
