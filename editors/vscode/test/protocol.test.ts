// Drives the real daemon (`soba serve --standalone`) over vscode-jsonrpc, the way the extension's
// language client does, and checks what the status bar would show after appends and a compaction.
// The binary comes from $SOBA_BIN (scripts/test builds and sets it).

import assert from 'node:assert/strict';
import { spawn, type ChildProcessWithoutNullStreams } from 'node:child_process';
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { after, before, describe, it } from 'node:test';
import { pathToFileURL } from 'node:url';
import { createMessageConnection, StreamMessageReader, StreamMessageWriter, type MessageConnection } from 'vscode-jsonrpc/node';
import { BUDGET_CHANGED, COMPACTION, type BudgetReport, type CompactionEvent, type ParamsOf, type RequestMethod, type ResultOf } from '../src/protocol';
import { BudgetTracker, formatTokens, severity, statusBarText, statusText, tooltipLines } from '../src/status';

const SOBA_BIN = process.env.SOBA_BIN ?? path.resolve(__dirname, '..', '..', '..', '..', 'target', 'debug', 'soba');
const WAIT_MS = 15_000;
// contextWindow − maxOutputTokens − safetyReserveTokens (0 in the workspace config below).
const HARD_LIMIT = 7_000;
const SOFT_LIMIT = 5_600; // floor(7000 × 0.8)

const WORDS = (
  'the parser reads each token from the input stream and builds a syntax tree that the checker ' +
  'walks twice once to collect declarations and once to resolve every reference against scopes ' +
  'while the emitter writes bytecode for functions closures loops and pattern matches'
).split(' ');

/** About `tokens` tokens of varied English, different for every `seed`. */
function prose(seed: number, tokens: number): string {
  const out: string[] = [`Step ${seed}:`];
  for (let i = 0; out.length < tokens; i++) out.push(WORDS[(seed * 7 + i * 3) % WORDS.length]);
  return out.join(' ');
}

function makeDir(dir: string): string {
  fs.mkdirSync(dir, { recursive: true });
  return dir;
}

class Daemon {
  readonly tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'soba-vscode-'));
  readonly workspace = fs.realpathSync(makeDir(path.join(this.tmp, 'workspace')));
  readonly budgets: BudgetReport[] = [];
  readonly compactions: CompactionEvent[] = [];
  readonly messages: Array<{ type: number; message: string }> = [];
  readonly tracker = new BudgetTracker(() => [this.workspace]);
  private stderr = '';
  exited!: Promise<string>;
  private running = true;
  private waiters: Array<() => void> = [];
  proc!: ChildProcessWithoutNullStreams;
  conn!: MessageConnection;

  start(): void {
    fs.mkdirSync(path.join(this.workspace, '.soba'), { recursive: true });
    fs.writeFileSync(
      path.join(this.workspace, '.soba', 'config.json'),
      JSON.stringify({ compaction: { keepRecentTokens: 600, safetyReserveTokens: 0, minTokensForAutoCompact: 1000 } }),
    );
    const dir = (name: string) => makeDir(path.join(this.tmp, name));
    this.proc = spawn(SOBA_BIN, ['serve', '--standalone'], {
      env: {
        ...process.env,
        SOBA_DATA_DIR: dir('data'),
        SOBA_RUNTIME_DIR: dir('runtime'),
        SOBA_CONFIG: path.join(this.tmp, 'no-user-config.json'),
        XDG_CONFIG_HOME: dir('config'),
        XDG_DATA_HOME: dir('xdg-data'),
      },
      stdio: ['pipe', 'pipe', 'pipe'],
    });
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
    this.conn.onNotification(COMPACTION, (event: CompactionEvent) => {
      this.compactions.push(event);
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
      throw new Error(`${SOBA_BIN} serve --standalone exited (${code}):\n${this.stderr.slice(-4000)}`);
    });
    return Promise.race([pending, exit]);
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

describe('status bar against the real daemon', { timeout: 120_000 }, () => {
  const daemon = new Daemon();
  let sessionId = '';

  before(async () => {
    assert.ok(fs.existsSync(SOBA_BIN), `no daemon binary at ${SOBA_BIN}: run cargo build --bin soba or set SOBA_BIN`);
    daemon.start();
    const uri = pathToFileURL(daemon.workspace).toString();
    await daemon.orExit(
      daemon.conn.sendRequest('initialize', {
        processId: process.pid,
        rootUri: uri,
        workspaceFolders: [{ uri, name: 'workspace' }],
        capabilities: {},
      }),
    );
    daemon.conn.sendNotification('initialized', {});
  });

  after(() => daemon.stop());

  it('opens a session with the model window given and shows its empty budget', async () => {
    const opened = await daemon.request('soba/session/open', {
      workspace: daemon.workspace,
      create: true,
      model: { contextWindow: 8_000, maxOutputTokens: 1_000 },
    });
    sessionId = opened.sessionId;
    assert.equal(opened.budget.hardLimit, HARD_LIMIT);
    assert.equal(opened.budget.softLimit, SOFT_LIMIT);

    // What the extension does at start: ask for the workspace's active session.
    const report = await daemon.request('soba/budget', { workspace: daemon.workspace });
    assert.equal(report.sessionId, sessionId);
    assert.equal(daemon.tracker.accept(report), true);
    assert.ok(report.effectiveTokens < 1_000, `an empty session costs ${report.effectiveTokens} tokens`);
    assert.equal(statusText(report), `${formatTokens(report.effectiveTokens)} / 7k`);
    assert.equal(severity(report), 'normal');
  });

  it('follows appends through soba/budgetChanged', async () => {
    const before = daemon.tracker.report!.effectiveTokens;
    const appended = await daemon.request('soba/session/append', {
      sessionId,
      entries: [
        { type: 'message', role: 'user', content: [{ type: 'text', text: prose(1, 600) }] },
        { type: 'message', role: 'assistant', content: [{ type: 'text', text: prose(2, 600) }] },
      ],
    });
    assert.equal(appended.entryIds.length, 2);
    assert.ok(appended.budget.effectiveTokens > before + 1_000, `${before} → ${appended.budget.effectiveTokens}`);
    await daemon.until('a budgetChanged notification matching the append', () => daemon.tracker.report?.effectiveTokens === appended.budget.effectiveTokens);
    const shown = daemon.tracker.report!;
    assert.equal(shown.sessionId, sessionId);
    assert.equal(statusText(shown), `${formatTokens(appended.budget.effectiveTokens)} / 7k`);
    assert.notEqual(statusText(shown), `${formatTokens(before)} / 7k`);
    assert.equal(severity(shown), 'normal');
  });

  it('turns the status bar to warning past the soft limit', async () => {
    let effective = daemon.tracker.report!.effectiveTokens;
    for (let i = 3; effective <= SOFT_LIMIT; i++) {
      assert.ok(i < 60, 'appends never got past the soft limit');
      const role = i % 2 ? 'user' : 'assistant';
      const { budget } = await daemon.request('soba/session/append', {
        sessionId,
        entries: [{ type: 'message', role, content: [{ type: 'text', text: prose(i, 250) }] }],
      });
      effective = budget.effectiveTokens;
    }
    assert.ok(effective < HARD_LIMIT, `one small append jumped past the hard limit: ${effective}`);
    await daemon.until('the budget past the soft limit', () => daemon.tracker.report?.effectiveTokens === effective);
    const shown = daemon.tracker.report!;
    assert.equal(severity(shown), 'warning');
    assert.equal(statusBarText(shown), `$(warning) ${formatTokens(effective)} / 7k`);
  });

  it('shows auto-compact off in the tooltip after soba/autoCompact', async () => {
    const { autoCompact } = await daemon.request('soba/autoCompact', { workspace: daemon.workspace, enabled: false });
    assert.equal(autoCompact, false);
    await daemon.until('a budgetChanged with auto-compact off', () => daemon.tracker.report?.autoCompact === false);
    assert.ok(tooltipLines(daemon.tracker.report!, new Date()).includes('Auto-compact: off'));
  });

  it('compacts with progress notifications and shows the smaller budget afterwards', async () => {
    const beforeTokens = daemon.tracker.report!.effectiveTokens;
    const result = await daemon.request('soba/compact', { workspace: daemon.workspace, instructions: 'keep the parser decisions' });
    assert.equal(result.outcome, 'completed', `compaction ${result.outcome}: ${result.reason}`);
    assert.ok(result.checkpointId, 'a completed compaction names its checkpoint');
    assert.ok(result.tokensAfter < result.tokensBefore, `${result.tokensBefore} → ${result.tokensAfter}`);

    await daemon.until('the compaction end notification', () =>
      daemon.compactions.some((e) => e.phase === 'end' && e.operationId === result.operationId),
    );
    const phases = daemon.compactions.filter((e) => e.operationId === result.operationId).map((e) => e.phase);
    assert.equal(phases[0], 'start');
    assert.equal(phases[phases.length - 1], 'end');
    const end = daemon.compactions.find((e) => e.phase === 'end' && e.operationId === result.operationId)!;
    assert.ok(end.message && end.message.includes(result.checkpointId!), `completion line: ${end.message}`);

    await daemon.until('a budgetChanged naming the new checkpoint', () => daemon.tracker.report?.lastCompaction?.checkpointId === result.checkpointId);
    const shown = daemon.tracker.report!;
    assert.ok(shown.effectiveTokens < beforeTokens, `${beforeTokens} → ${shown.effectiveTokens}`);
    assert.equal(statusText(shown), `${formatTokens(shown.effectiveTokens)} / 7k`);
    assert.equal(severity(shown), 'normal');
    assert.equal(shown.compacting, false);
    const lastLine = tooltipLines(shown, new Date()).find((l) => l.startsWith('Last compaction: '))!;
    assert.ok(lastLine.startsWith('Last compaction: manual: '), lastLine);
    assert.ok(lastLine.includes(result.checkpointId!), lastLine);
    if (result.degraded) {
      assert.ok(daemon.messages.some((m) => m.type === 2), 'a degraded fallback is announced with a warning');
    }
    // The Recent Compactions view reads the flight records.
    const { records } = await daemon.request('soba/flight', { workspace: daemon.workspace, limit: 10 });
    const record = records.find((r) => r.operationId === result.operationId);
    assert.ok(record, JSON.stringify(records));
    assert.equal(record.outcome, 'completed');
    assert.equal(record.trigger, 'manual');
  });

  it('lists the workspace sessions for the sidebar with the active one marked', async () => {
    const { sessions } = await daemon.request('soba/sessions', { workspace: daemon.workspace });
    assert.deepEqual(sessions.filter((s) => s.active).map((s) => s.sessionId), [sessionId]);
    const active = sessions.find((s) => s.active)!;
    assert.equal(active.effectiveTokens, daemon.tracker.report!.effectiveTokens);
    assert.equal(active.hardLimit, HARD_LIMIT);
  });

  it('creates, lists, exports and loads a capsule', async () => {
    const created = await daemon.request('soba/capsule/create', { workspace: daemon.workspace, title: 'Parser hand-off' });
    const { capsules } = await daemon.request('soba/capsule/list', { workspace: daemon.workspace });
    assert.ok(capsules.some((c) => c.checkpointId === created.checkpointId && c.title === 'Parser hand-off'));

    const file = path.join(daemon.tmp, 'parser-hand-off.capsule.md');
    const exported = await daemon.request('soba/capsule/export', { workspace: daemon.workspace, checkpointId: created.checkpointId, path: file });
    assert.ok(fs.statSync(exported.path).size > 0);
    const loaded = await daemon.request('soba/capsule/load', { workspace: daemon.workspace, path: file });
    assert.equal(loaded.sessionId, sessionId);
    const after = await daemon.request('soba/capsule/list', { workspace: daemon.workspace });
    assert.ok(after.capsules.some((c) => c.checkpointId === loaded.checkpointId && c.origin === 'loaded'));
  });

  it('answers a bad request with invalid params naming the field', async () => {
    await assert.rejects(
      daemon.request('soba/autoCompact', { workspace: daemon.workspace } as never),
      (err: { code: number; message: string }) => {
        assert.equal(err.code, -32602, err.message);
        assert.match(err.message, /enabled/);
        return true;
      },
    );
  });
});
