// The daemon connection (dist/client.js, the SDK's client; its framing is tested in sdk/ts): a
// daemon that is missing, fails or stays silent, and error answers of the real daemon. The fake
// daemons frame their messages with the SDK's framing (dist/framing.js).
import { test, after } from 'node:test';
import assert from 'node:assert/strict';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { SobaConnection, SobaUnavailable, SobaError } from '../dist/client.js';

const dir = fs.realpathSync(fs.mkdtempSync(path.join(os.tmpdir(), 'soba-pi-client-')));
after(() => fs.rmSync(dir, { recursive: true, force: true }));

function script(name, body) {
  const file = path.join(dir, name);
  fs.writeFileSync(file, `#!/bin/sh\n${body}\n`, { mode: 0o755 });
  return file;
}

const connect = (bin, timeoutMs = 5000) => SobaConnection.connect({ bin, workspace: dir, timeoutMs });

test('a missing binary is SobaUnavailable naming it', async () => {
  await assert.rejects(connect(path.join(dir, 'nope')), (e) =>
    e instanceof SobaUnavailable && /cannot start `.*nope serve`: spawn .*ENOENT/.test(e.message));
});

test('a daemon that exits is SobaUnavailable with its exit code and what it said', async () => {
  const bin = script('dies', 'echo "no runtime folder" >&2; exit 4');
  await assert.rejects(connect(bin), (e) =>
    e instanceof SobaUnavailable && e.message.endsWith('serve` exited with code 4: no runtime folder'));
});

test('a silent daemon is SobaUnavailable after the deadline, and is stopped', async () => {
  const pidFile = path.join(dir, 'silent.pid');
  const bin = script('silent', `echo $$ > ${pidFile}; exec sleep 300`);
  await assert.rejects(connect(bin, 300), (e) => e instanceof SobaUnavailable && /no answer to initialize within 0.3s/.test(e.message));
  const pid = Number(fs.readFileSync(pidFile, 'utf8'));
  const start = Date.now();
  while (Date.now() - start < 5000) {
    try {
      process.kill(pid, 0);
    } catch {
      return;
    }
    await new Promise((r) => setTimeout(r, 50));
  }
  assert.fail('the silent daemon was left running');
});

test('garbage on stdout is SobaUnavailable, not a crash', async () => {
  const bin = script('garbage', 'printf "Content-Length: 2\\r\\n\\r\\nno"; exec sleep 300');
  await assert.rejects(connect(bin), (e) => e instanceof SobaUnavailable && /not JSON/.test(e.message));
});

test('the real daemon: requests answer, errors arrive as SobaError with their code', { skip: !process.env.SOBA_BIN }, async () => {
  const env = {
    ...process.env,
    SOBA_DATA_DIR: path.join(dir, 'data'),
    SOBA_RUNTIME_DIR: path.join(dir, 'run'),
    SOBA_CONFIG: path.join(dir, 'none.json'),
    SOBA_DAEMON_IDLE_SECS: '2',
  };
  const c = await SobaConnection.connect({ bin: process.env.SOBA_BIN, workspace: dir, timeoutMs: 10000, env });
  const { sessionId } = await c.request('soba/session/open', { workspace: dir });
  assert.match(sessionId, /^s_/);
  await assert.rejects(c.request('soba/budget', { sessionId: 's_nope' }), (e) => e instanceof SobaError && e.code === -32002);
  assert.equal(c.alive, true);
  await c.request('soba/session/close', { sessionId });
  await c.close();
  assert.equal(c.alive, false);
  await assert.rejects(c.request('soba/sessions', {}), SobaUnavailable);
});

test("the daemon's soba/summarize runs on the offered model; $/cancelRequest aborts it", async () => {
  // A daemon that offers two prompts once initialized, cancels the second, and reports what it
  // got back when asked.
  const framing = path.resolve('dist/framing.js');
  const fake = path.join(dir, 'summarizing-daemon.mjs');
  fs.writeFileSync(
    fake,
    `#!/usr/bin/env node
import { encodeFrame as encode, FrameReader } from ${JSON.stringify(framing)};
const send = (m) => process.stdout.write(encode(m));
const answers = {};
let offer;
let report;
const flush = () => {
  if (report !== undefined && answers[7] && answers[8]) send({ jsonrpc: '2.0', id: report, result: { offer, answers } });
};
const reader = new FrameReader();
const onMessage = (m) => {
  if (m.method === 'initialize') {
    offer = m.params.capabilities?.experimental?.soba?.summarize ?? null;
    send({ jsonrpc: '2.0', id: m.id, result: { capabilities: {} } });
    const p = { sessionId: 's_1', operationId: 'op_1', system: 'sys', maxOutputTokens: 100 };
    send({ jsonrpc: '2.0', id: 7, method: 'soba/summarize', params: { ...p, user: 'quick' } });
    send({ jsonrpc: '2.0', id: 8, method: 'soba/summarize', params: { ...p, user: 'slow' } });
    send({ jsonrpc: '2.0', method: '$/cancelRequest', params: { id: 8 } });
  } else if (m.method === 'shutdown') {
    send({ jsonrpc: '2.0', id: m.id, result: null });
  } else if (m.method === 'exit') {
    process.exit(0);
  } else if (m.method === 'soba/sessions') {
    report = m.id;
  } else if (m.method === undefined) {
    answers[m.id] = m;
  }
  flush();
};
process.stdin.on('data', (d) => reader.push(d).forEach(onMessage));
`,
    { mode: 0o755 },
  );
  const seen = [];
  const c = await SobaConnection.connect({
    bin: fake,
    workspace: dir,
    timeoutMs: 5000,
    summarize: (params, signal) => {
      seen.push(params);
      if (params.user === 'quick') return Promise.resolve({ text: `summary of ${params.user}`, hitOutputLimit: false });
      return new Promise((_, reject) => signal.addEventListener('abort', () => reject(new Error('aborted: the daemon stopped waiting'))));
    },
  });
  // soba/sessions stands in for "report what you got back".
  const { offer, answers } = await c.request('soba/sessions', {});
  assert.deepEqual(offer, {}, 'the offer is declared at initialize');
  assert.deepEqual(answers[7].result, { text: 'summary of quick', hitOutputLimit: false });
  assert.equal(answers[8].error.message, 'aborted: the daemon stopped waiting');
  assert.deepEqual(
    seen.map((p) => [p.sessionId, p.system, p.user, p.maxOutputTokens]),
    [
      ['s_1', 'sys', 'quick', 100],
      ['s_1', 'sys', 'slow', 100],
    ],
  );
  await c.close();
});

/** Whether process `pid` is gone (or a zombie waiting to be reaped). */
function gone(pid) {
  try {
    return fs.readFileSync(`/proc/${pid}/stat`, 'utf8').replace(/^.*\) /, '')[0] === 'Z';
  } catch {
    return true;
  }
}

/**
 * A daemon that answers initialize and shutdown but ignores `exit` and the end of its stdin;
 * with `ignoreTerm` it ignores SIGTERM too. It writes its pid to `pidFile`.
 */
function stubbornDaemon(name, pidFile, { ignoreTerm = false } = {}) {
  const framing = path.resolve('dist/framing.js');
  const file = path.join(dir, name);
  fs.writeFileSync(
    file,
    `#!/usr/bin/env node
import fs from 'node:fs';
import { encodeFrame as encode, FrameReader } from ${JSON.stringify(framing)};
fs.writeFileSync(${JSON.stringify(pidFile)}, String(process.pid));
${ignoreTerm ? "process.on('SIGTERM', () => {});" : ''}
const reader = new FrameReader();
process.stdin.on('data', (d) => {
  for (const m of reader.push(d)) {
    if (m.method === 'initialize' || m.method === 'shutdown') process.stdout.write(encode({ jsonrpc: '2.0', id: m.id, result: {} }));
  }
});
setInterval(() => {}, 1000);
`,
    { mode: 0o755 },
  );
  return file;
}

test('close() resolves once soba serve has exited: the real daemon on its closed stdin', { skip: !process.env.SOBA_BIN }, async () => {
  const env = {
    ...process.env,
    SOBA_DATA_DIR: path.join(dir, 'data-close'),
    SOBA_RUNTIME_DIR: path.join(dir, 'run-close'),
    SOBA_CONFIG: path.join(dir, 'none.json'),
    SOBA_DAEMON_IDLE_SECS: '1',
  };
  const c = await SobaConnection.connect({ bin: process.env.SOBA_BIN, workspace: dir, timeoutMs: 10000, env });
  const pid = c.pid;
  assert.ok(pid && !gone(pid));
  const started = Date.now();
  await c.close();
  assert.ok(gone(pid), 'soba serve has exited');
  assert.ok(Date.now() - started < 1000, `it exited on its own, within ${Date.now() - started} ms`);
});

test('close() kills a daemon that ignores its closed stdin and SIGTERM', async () => {
  const pidFile = path.join(dir, 'stubborn.pid');
  const c = await connect(stubbornDaemon('stubborn', pidFile, { ignoreTerm: true }));
  const pid = Number(fs.readFileSync(pidFile, 'utf8'));
  const started = Date.now();
  await c.close();
  assert.ok(gone(pid), 'the daemon was killed');
  assert.ok(Date.now() - started >= 1000, 'it had its grace period first');
});

test('the daemon is stopped when the process that started it exits without closing it', async () => {
  const pidFile = path.join(dir, 'orphan.pid');
  const bin = stubbornDaemon('orphan', pidFile);
  const client = path.resolve('dist/client.js');
  const { execFileSync } = await import('node:child_process');
  execFileSync(
    process.execPath,
    [
      '--input-type=module',
      '-e',
      `import { SobaConnection } from ${JSON.stringify(client)};
await SobaConnection.connect({ bin: ${JSON.stringify(bin)}, workspace: ${JSON.stringify(dir)}, timeoutMs: 5000 });
process.exit(0);`,
    ],
    { stdio: 'pipe' },
  );
  const pid = Number(fs.readFileSync(pidFile, 'utf8'));
  const start = Date.now();
  while (!gone(pid)) {
    assert.ok(Date.now() - start < 3000, 'the daemon was left running');
    await new Promise((r) => setTimeout(r, 50));
  }
});
