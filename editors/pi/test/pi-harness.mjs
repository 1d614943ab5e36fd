// Runs the real pi (the pinned npm package) headless in RPC mode, with this extension installed
// the way a user installs it (`pi install <path>`), against the fake model server, in a
// temporary home: agent folder, workspace, and the SOBA daemon's data and runtime folders.
import { spawn, execFileSync } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

export const PACKAGE = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..');
const PI_CLI = path.join(PACKAGE, 'node_modules/@mariozechner/pi-coding-agent/dist/cli.js');

/** The model pi uses: a small window, so a few turns fill it. */
export const MODEL = { id: 'fake-coder', contextWindow: 16000, maxTokens: 1000 };
/** pi compacts when its context passes contextWindow - reserveTokens. */
export const PI_RESERVE_TOKENS = 4000;

export function makeHome({ baseUrl, sobaBin, timeoutMs, env: extraEnv = {} }) {
  const root = fs.realpathSync(fs.mkdtempSync(path.join(os.tmpdir(), 'soba-pi-')));
  const agentDir = path.join(root, 'agent');
  const workspace = path.join(root, 'work');
  fs.mkdirSync(agentDir, { recursive: true });
  fs.mkdirSync(path.join(workspace, '.soba'), { recursive: true });
  fs.writeFileSync(path.join(workspace, 'notes.txt'), 'remember: the flaky test is auth_retry\n');
  fs.writeFileSync(
    path.join(agentDir, 'models.json'),
    JSON.stringify({
      providers: {
        fake: {
          baseUrl,
          api: 'openai-completions',
          apiKey: 'test-key',
          compat: { supportsDeveloperRole: false, supportsReasoningEffort: false, supportsUsageInStreaming: true },
          models: [{ ...MODEL, name: 'Fake Coder', reasoning: false, input: ['text'], cost: { input: 0, output: 0, cacheRead: 0, cacheWrite: 0 } }],
        },
      },
    }),
  );
  fs.writeFileSync(
    path.join(agentDir, 'settings.json'),
    JSON.stringify({
      defaultProvider: 'fake',
      defaultModel: MODEL.id,
      compaction: { enabled: true, reserveTokens: PI_RESERVE_TOKENS, keepRecentTokens: 2000 },
    }),
  );
  // SOBA keeps a tail of about the same size as pi would.
  fs.writeFileSync(
    path.join(workspace, '.soba', 'config.json'),
    JSON.stringify({ compaction: { keepRecentTokens: 2000, safetyReserveTokens: 1000, minTokensForAutoCompact: 3000 } }),
  );
  const env = {
    PATH: process.env.PATH,
    HOME: root,
    PI_CODING_AGENT_DIR: agentDir,
    PI_OFFLINE: '1',
    PI_SKIP_VERSION_CHECK: '1',
    PI_TELEMETRY: '0',
    SOBA_BIN: sobaBin,
    SOBA_DATA_DIR: path.join(root, 'soba-data'),
    SOBA_RUNTIME_DIR: path.join(root, 'soba-run'),
    SOBA_CONFIG: path.join(root, 'no-user-config.json'),
    SOBA_DAEMON_IDLE_SECS: '5',
    ...(timeoutMs ? { SOBA_PI_TIMEOUT_MS: String(timeoutMs) } : {}),
    ...extraEnv,
  };
  execFileSync(process.execPath, [PI_CLI, 'install', PACKAGE], { env, cwd: workspace, stdio: 'pipe' });
  return { root, agentDir, workspace, env, remove: () => fs.rmSync(root, { recursive: true, force: true }) };
}

/** pi in RPC mode: JSON lines in on stdin, events and responses out on stdout. */
export class Pi {
  constructor(home, args = []) {
    this.events = [];
    this.waiters = [];
    this.stderr = '';
    this.child = spawn(process.execPath, [PI_CLI, '--mode', 'rpc', ...args], {
      cwd: home.workspace,
      env: home.env,
      stdio: ['pipe', 'pipe', 'pipe'],
    });
    let buf = '';
    this.child.stdout.setEncoding('utf8');
    this.child.stdout.on('data', (d) => {
      buf += d;
      let nl;
      while ((nl = buf.indexOf('\n')) >= 0) {
        const line = buf.slice(0, nl).trim();
        buf = buf.slice(nl + 1);
        if (!line) continue;
        try {
          this.events.push(JSON.parse(line));
        } catch {
          continue;
        }
        this.check();
      }
    });
    this.child.stderr.setEncoding('utf8');
    this.child.stderr.on('data', (d) => (this.stderr += d));
    this.exited = new Promise((resolve) => this.child.once('exit', resolve));
    this.nextId = 1;
  }

  check() {
    for (const w of [...this.waiters]) {
      const hit = this.events.slice(w.from).find(w.pred);
      if (hit) {
        this.waiters.splice(this.waiters.indexOf(w), 1);
        clearTimeout(w.timer);
        w.resolve(hit);
      }
    }
  }

  /** The first event from index `from` on that satisfies `pred`. */
  waitFor(pred, { from = 0, ms = 60000, what = 'an event' } = {}) {
    return new Promise((resolve, reject) => {
      const w = { pred, from, resolve };
      w.timer = setTimeout(() => {
        this.waiters.splice(this.waiters.indexOf(w), 1);
        reject(new Error(`timed out waiting for ${what}; events: ${JSON.stringify(this.events.map((e) => e.type))}\nstderr: ${this.stderr}`));
      }, ms);
      this.waiters.push(w);
      this.check();
    });
  }

  /** Send a command and wait for its response. */
  async command(cmd) {
    const id = `c${this.nextId++}`;
    const from = this.events.length;
    this.child.stdin.write(`${JSON.stringify({ id, ...cmd })}\n`);
    const res = await this.waitFor((e) => e.type === 'response' && e.id === id, { from, what: `the response to ${cmd.type}` });
    if (!res.success) throw new Error(`${cmd.type} failed: ${res.error}`);
    return res.data;
  }

  async quit() {
    this.child.stdin.end();
    const timer = setTimeout(() => this.child.kill(), 10000);
    await this.exited;
    clearTimeout(timer);
  }
}

export function readJsonl(file) {
  return fs
    .readFileSync(file, 'utf8')
    .split('\n')
    .filter((l) => l.trim())
    .map((l) => JSON.parse(l));
}

/**
 * pi in print mode (`pi -p …`, `pi -c -p …`): runs to its end. `onStart(child)` may signal it.
 * Resolves with its exit code or signal and what it wrote.
 */
export function runPi(home, args, { onStart } = {}) {
  const child = spawn(process.execPath, [PI_CLI, ...args], {
    cwd: home.workspace,
    env: home.env,
    // Print mode reads a prompt from a piped stdin until it ends: give it none.
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let stdout = '';
  let stderr = '';
  child.stdout.setEncoding('utf8');
  child.stderr.setEncoding('utf8');
  child.stdout.on('data', (d) => (stdout += d));
  child.stderr.on('data', (d) => (stderr += d));
  onStart?.(child);
  return new Promise((resolve) => {
    child.once('exit', (code, signal) => resolve({ code, signal, stdout, stderr, pid: child.pid }));
  });
}

/** The pi session file of `home` (the runs here continue one session). */
export function piSessionFile(home) {
  const dir = path.join(home.agentDir, 'sessions');
  const files = fs
    .readdirSync(dir, { recursive: true })
    .filter((f) => f.endsWith('.jsonl'))
    .map((f) => path.join(dir, f));
  if (files.length !== 1) throw new Error(`expected one pi session file under ${dir}, found ${JSON.stringify(files)}`);
  return files[0];
}

/** SOBA's session log `sessionId` of `home`. */
export function sobaLog(home, sessionId) {
  const logs = path.join(home.env.SOBA_DATA_DIR, 'workspaces');
  const file = fs
    .readdirSync(logs, { recursive: true })
    .map((f) => path.join(logs, f))
    .find((f) => f.endsWith(`${sessionId}.jsonl`));
  if (!file) throw new Error(`SOBA's session log ${sessionId} is not under ${logs}`);
  return file;
}

/**
 * The live processes started for `home` other than `except`: each inherits (or, for the
 * shared daemon, is given) this home's SOBA_RUNTIME_DIR, so /proc tells them apart from any
 * other test's. Zombies (already dead, waiting to be reaped) do not count.
 */
export function processesOf(home, except = []) {
  const marker = Buffer.from(`SOBA_RUNTIME_DIR=${home.env.SOBA_RUNTIME_DIR}\0`);
  const found = [];
  for (const name of fs.readdirSync('/proc')) {
    const pid = Number(name);
    if (!Number.isInteger(pid) || except.includes(pid)) continue;
    try {
      const environ = fs.readFileSync(`/proc/${pid}/environ`);
      if (!environ.includes(marker)) continue;
      const state = fs.readFileSync(`/proc/${pid}/stat`, 'utf8').replace(/^.*\) /, '')[0];
      if (state === 'Z') continue;
      const cmd = fs.readFileSync(`/proc/${pid}/cmdline`, 'utf8').split('\0').filter(Boolean).join(' ');
      found.push({ pid, cmd });
    } catch {
      // Gone meanwhile, or not ours to read.
    }
  }
  return found;
}

/**
 * Once pi has exited nothing it started is left: its `soba serve` within `relayMs` (0: pi
 * waited for it), and the shared daemon (`soba serve --daemon`) within its idle time
 * (SOBA_DAEMON_IDLE_SECS) and `graceMs`.
 */
export async function assertNothingLeft(home, { relayMs = 0, graceMs = 4000 } = {}) {
  const relays = () => processesOf(home).filter((p) => !p.cmd.includes('--daemon'));
  await until(() => relays().length === 0, relayMs, () => `still running ${relayMs} ms after pi exited: ${JSON.stringify(relays())}`);
  const idleMs = Number(home.env.SOBA_DAEMON_IDLE_SECS) * 1000;
  await until(() => processesOf(home).length === 0, idleMs + graceMs, () => `still running ${idleMs + graceMs} ms after pi exited: ${JSON.stringify(processesOf(home))}`);
}

async function until(done, ms, why) {
  const deadline = Date.now() + ms;
  while (!done()) {
    if (Date.now() >= deadline) throw new Error(why());
    await new Promise((r) => setTimeout(r, 50));
  }
}

/**
 * pi interactive, in a terminal: script(1) gives it a pseudo-terminal of 120×40, `type` sends
 * keys, `screen()` is what it drew so far with the escape sequences taken out.
 */
export class InteractivePi {
  constructor(home) {
    this.home = home;
    this.output = '';
    this.child = spawn('script', ['-qfec', `stty cols 120 rows 40; exec '${process.execPath}' '${PI_CLI}'`, '/dev/null'], {
      cwd: home.workspace,
      env: { ...home.env, TERM: 'xterm-256color' },
      stdio: ['pipe', 'pipe', 'pipe'],
    });
    this.child.stdout.setEncoding('utf8');
    this.child.stdout.on('data', (d) => (this.output += d));
    this.child.stderr.on('data', (d) => (this.output += d));
    this.exited = new Promise((resolve) => this.child.once('exit', resolve));
  }

  screen() {
    return this.output.replace(/\x1b\[[0-9;?<>=]*[ -/]*[@-~]|\x1b\][^\x07\x1b]*(\x07|\x1b\\)|\x1b[@-_]/g, '');
  }

  /** Wait until the screen shows `pattern`, with lines wrapped by the terminal joined up. */
  async waitForScreen(pattern, ms = 30000) {
    const deadline = Date.now() + ms;
    while (!pattern.test(this.screen().replace(/\s+/g, ' '))) {
      if (Date.now() > deadline || this.child.exitCode !== null) {
        throw new Error(`pi's screen never showed ${pattern}; it ends with:\n${this.screen().slice(-2000)}`);
      }
      await new Promise((r) => setTimeout(r, 50));
    }
  }

  /** Type `text` into pi's editor and press Enter. */
  async submit(text) {
    this.child.stdin.write(text);
    await new Promise((r) => setTimeout(r, 200));
    this.child.stdin.write('\r');
  }
}

/** Wait until pi's session in `home` holds `users` user messages and its last turn has ended. */
export async function waitForTurn(home, users, ms = 60000) {
  const deadline = Date.now() + ms;
  for (;;) {
    let entries = [];
    try {
      entries = readJsonl(piSessionFile(home));
    } catch {
      // No session file before pi's first answer.
    }
    const messages = entries.filter((e) => e.type === 'message');
    const last = messages.at(-1)?.message;
    if (messages.filter((e) => e.message.role === 'user').length === users && last?.role === 'assistant' && last.stopReason === 'stop') {
      return entries;
    }
    if (Date.now() > deadline) throw new Error(`pi did not finish turn ${users}: ${JSON.stringify(messages.map((e) => e.message.role))}`);
    await new Promise((r) => setTimeout(r, 50));
  }
}
