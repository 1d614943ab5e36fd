// A real daemon for the tests: `soba serve` in temporary folders, spoken to over vscode-jsonrpc.
// The binary comes from $SOBA_BIN (scripts/test builds and sets it).

import assert from 'node:assert/strict';
import { spawn, type ChildProcessWithoutNullStreams } from 'node:child_process';
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { pathToFileURL } from 'node:url';
import { createMessageConnection, StreamMessageReader, StreamMessageWriter, type MessageConnection } from 'vscode-jsonrpc/node';
import {
  BUDGET_CHANGED,
  COMPACTION,
  SESSION_CLOSED,
  type BudgetReport,
  type CompactionNotification,
  type ParamsOf,
  type RequestMethod,
  type ResultOf,
  type SessionClosedNotification,
} from '../src/protocol';
import { BudgetTracker } from '../src/status';
import { REPO_ROOT } from './paths';

export const SOBA_BIN = process.env.SOBA_BIN ?? path.resolve(REPO_ROOT, 'target', 'debug', 'soba');
export const WAIT_MS = 15_000;
// contextWindow − maxOutputTokens − safetyReserveTokens (0 in the workspace config below).
export const HARD_LIMIT = 7_000;
export const SOFT_LIMIT = 5_600; // floor(7000 × 0.8)

const WORDS = (
  'the parser reads each token from the input stream and builds a syntax tree that the checker ' +
  'walks twice once to collect declarations and once to resolve every reference against scopes ' +
  'while the emitter writes bytecode for functions closures loops and pattern matches'
).split(' ');

/** About `tokens` tokens of varied English, different for every `seed`. */
export function prose(seed: number, tokens: number): string {
  const out: string[] = [`Step ${seed}:`];
  for (let i = 0; out.length < tokens; i++) out.push(WORDS[(seed * 7 + i * 3) % WORDS.length]);
  return out.join(' ');
}

export function makeDir(dir: string): string {
  fs.mkdirSync(dir, { recursive: true });
  return dir;
}

export class Daemon {
  readonly binary = SOBA_BIN;
  readonly tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'soba-vscode-'));
  readonly workspace = fs.realpathSync(makeDir(path.join(this.tmp, 'workspace')));
  readonly budgets: BudgetReport[] = [];
  readonly compactions: CompactionNotification[] = [];
  readonly closed: SessionClosedNotification[] = [];
  readonly messages: Array<{ type: number; message: string }> = [];
  readonly tracker = new BudgetTracker(() => [this.workspace]);
  private stderr = '';
  exited!: Promise<string>;
  private running = true;
  private waiters: Array<() => void> = [];
  proc!: ChildProcessWithoutNullStreams;
  conn!: MessageConnection;

  /** The environment the daemon runs in: its folders in `tmp`, never the user's. */
  readonly env: Record<string, string> = {
    SOBA_DATA_DIR: makeDir(path.join(this.tmp, 'data')),
    SOBA_RUNTIME_DIR: makeDir(path.join(this.tmp, 'runtime')),
    SOBA_CONFIG: path.join(this.tmp, 'no-user-config.json'),
    XDG_CONFIG_HOME: makeDir(path.join(this.tmp, 'config')),
    XDG_DATA_HOME: makeDir(path.join(this.tmp, 'xdg-data')),
    // A shared daemon started by `soba serve` goes away soon after the tests.
    SOBA_DAEMON_IDLE_SECS: '2',
  };

  /** `soba serve --standalone` by default; `['serve']` relays to the shared daemon of `env`. */
  start(args: string[] = ['serve', '--standalone']): void {
    fs.mkdirSync(path.join(this.workspace, '.soba'), { recursive: true });
    fs.writeFileSync(
      path.join(this.workspace, '.soba', 'config.json'),
      JSON.stringify({ compaction: { keepRecentTokens: 600, safetyReserveTokens: 0, minTokensForAutoCompact: 1000 } }),
    );
    this.proc = spawn(SOBA_BIN, args, { env: { ...process.env, ...this.env }, stdio: ['pipe', 'pipe', 'pipe'] });
    this.proc.stderr.on('data', (chunk: Buffer) => (this.stderr += chunk.toString()));
    this.exited = new Promise((resolve) =>
      this.proc.once('exit', (code, signal) => {
        this.running = false;
        resolve(`${code ?? signal}`);
      }),
    );
    // A daemon that died leaves writes failing; the exit itself is what the tests report.
    this.proc.stdin.on('error', () => undefined);
    this.conn = createMessageConnection(new StreamMessageReader(this.proc.stdout), new StreamMessageWriter(this.proc.stdin));
    this.conn.onNotification(BUDGET_CHANGED, (report: BudgetReport) => {
      this.budgets.push(report);
      this.tracker.accept(report);
      this.wake();
    });
    this.conn.onNotification(COMPACTION, (event: CompactionNotification) => {
      this.compactions.push(event);
      this.wake();
    });
    this.conn.onNotification(SESSION_CLOSED, (closed: SessionClosedNotification) => {
      this.closed.push(closed);
      this.tracker.forget(closed.sessionId);
      this.wake();
    });
    this.conn.onNotification('window/showMessage', (m: { type: number; message: string }) => void this.messages.push(m));
    this.conn.onNotification('window/logMessage', () => undefined);
    this.conn.onRequest(() => null);
    this.conn.listen();
  }

  private wake(): void {
    const waiters = this.waiters;
    this.waiters = [];
    for (const w of waiters) w();
  }

  /** Resolves once `done()` holds, re-checked after every notification. */
  async until(what: string, done: () => boolean): Promise<void> {
    const deadline = Date.now() + WAIT_MS;
    while (!done()) {
      const left = deadline - Date.now();
      if (left <= 0) assert.fail(`timed out waiting for ${what}; daemon stderr:\n${this.stderr.slice(-4000)}`);
      await new Promise<void>((resolve) => {
        const timer = setTimeout(resolve, Math.min(left, 250));
        this.waiters.push(() => {
          clearTimeout(timer);
          resolve();
        });
      });
    }
  }

  /** Fails with the daemon's own words when it exits instead of answering. */
  async orExit<T>(pending: Promise<T>): Promise<T> {
    const exit = this.exited.then((code) => {
      throw new Error(`${SOBA_BIN} ${this.proc.spawnargs.slice(1).join(' ')} exited (${code}):\n${this.stderr.slice(-4000)}`);
    });
    return Promise.race([pending, exit]);
  }

  /** LSP initialize with the temp workspace as the only folder. */
  async initialize(): Promise<void> {
    const uri = pathToFileURL(this.workspace).toString();
    await this.orExit(
      this.conn.sendRequest('initialize', {
        processId: process.pid,
        rootUri: uri,
        workspaceFolders: [{ uri, name: 'workspace' }],
        capabilities: {},
      }),
    );
    this.conn.sendNotification('initialized', {});
  }

  request<M extends RequestMethod>(method: M, params: ParamsOf<M>): Promise<ResultOf<M>> {
    return this.conn.sendRequest(method, params) as Promise<ResultOf<M>>;
  }

  async stop(): Promise<void> {
    if (!this.running) {
      this.conn.dispose();
      fs.rmSync(this.tmp, { recursive: true, force: true });
      return;
    }
    try {
      await Promise.race([this.conn.sendRequest('shutdown'), new Promise((r) => setTimeout(r, 2000))]);
      this.conn.sendNotification('exit');
    } catch {
      // Already gone; the kill below is enough.
    }
    this.conn.dispose();
    setTimeout(() => this.proc.kill('SIGKILL'), 2000).unref();
    await this.exited;
    fs.rmSync(this.tmp, { recursive: true, force: true });
  }
}

