// The extension's connection to the SOBA daemon: the SDK's client (sdk/ts/src/client.ts, bundled
// into dist/ by esbuild) over `soba serve`'s stdio, every request under a deadline, with the
// errors the extension acts on. Any failure of the child (not installed, exited, silent) fails
// the pending requests with SobaUnavailable, on which pi compacts on its own.
import { SobaClient, type Summarize } from '../../../sdk/ts/src/client.js';
import { SobaConnectionError, SobaError } from '../../../sdk/ts/src/errors.js';
import type { MethodName, Methods } from '../../../sdk/ts/src/protocol.js';

export { SobaError, type Summarize };
export type { SummarizeParams, SummarizeResult } from '../../../sdk/ts/src/protocol.js';

/** SOBA cannot answer: not installed, exited, or too slow. pi then compacts on its own. */
export class SobaUnavailable extends Error {}

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

/** How long a closing daemon connection may take to exit by itself once its stdin is closed. */
const EXIT_GRACE_MS = 1000;

/** The connection's end is SobaUnavailable saying why; the daemon's error answers stay SobaError. */
function unavailable(e: unknown): unknown {
  return e instanceof SobaConnectionError ? new SobaUnavailable(e.reason) : e;
}

export class SobaConnection {
  private constructor(private readonly client: SobaClient) {}

  /** Start `soba serve` and initialize the connection, or throw SobaUnavailable saying why. */
  static async connect(o: ConnectOptions): Promise<SobaConnection> {
    try {
      const client = await SobaClient.spawn({
        bin: o.bin,
        env: o.env ?? process.env,
        workspaceFolders: [o.workspace],
        clientName: 'pi',
        requestTimeoutMs: o.timeoutMs,
        ...(o.summarize ? { summarize: o.summarize } : {}),
        // A pi run must be able to end while the daemon connection sits idle.
        unref: true,
        exitGraceMs: EXIT_GRACE_MS,
      });
      return new SobaConnection(client);
    } catch (e) {
      throw unavailable(e);
    }
  }

  get alive(): boolean {
    return this.client.alive;
  }

  /** The process id of `soba serve`, once started. */
  get pid(): number | undefined {
    return this.client.pid;
  }

  /**
   * A request answered within the deadline. An error answer is a SobaError (`code`, `message`);
   * a dead or silent daemon is SobaUnavailable, and the connection is then closed.
   */
  async request<M extends MethodName>(method: M, params: Methods[M]['params']): Promise<Methods[M]['result']> {
    try {
      return await this.client.request(method, params);
    } catch (e) {
      throw unavailable(e);
    }
  }

  /** A request whose answer does not matter (soba/cancel of an aborted compaction). */
  fireAndForget<M extends MethodName>(method: M, params: Methods[M]['params']): void {
    this.request(method, params).catch(() => {});
  }

  /**
   * Shut down politely (so the shared daemon lets this client go) and close the child's stdin,
   * on which `soba serve` exits; a child still there after EXIT_GRACE_MS is stopped (SIGTERM,
   * then SIGKILL). Resolves once the child has exited.
   */
  close(): Promise<void> {
    return this.client.close();
  }
}
