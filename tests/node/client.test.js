// Drives the built `soba` binary the way VS Code does: vscode-jsonrpc over the child's stdio,
// through the shared per-user daemon that `soba serve` starts.
'use strict';

const { test, after } = require('node:test');
const assert = require('node:assert/strict');
const { spawn } = require('node:child_process');
const fs = require('node:fs');
const os = require('node:os');
const path = require('node:path');
const rpc = require('vscode-jsonrpc/node');

const BIN = process.env.SOBA_BIN || path.resolve(__dirname, '../../target/debug/soba');
const base = fs.mkdtempSync(path.join(os.tmpdir(), 'soba-node-'));
const env = {
  ...process.env,
  SOBA_DATA_DIR: path.join(base, 'data'),
  SOBA_RUNTIME_DIR: path.join(base, 'run'),
  SOBA_CONFIG: path.join(base, 'no-user-config.json'),
  SOBA_DAEMON_IDLE_SECS: '2',
};
const children = [];

after(() => {
  for (const c of children) c.kill();
  fs.rmSync(base, { recursive: true, force: true });
});

function workspace(name, config) {
  const ws = path.join(base, name);
  fs.mkdirSync(path.join(ws, '.soba'), { recursive: true });
  if (config) fs.writeFileSync(path.join(ws, '.soba', 'config.json'), JSON.stringify(config));
  return fs.realpathSync(ws);
}

/** Start `soba serve` and an initialized connection to it. */
async function connect(ws, { progress = true } = {}) {
  const child = spawn(BIN, ['serve'], { env, stdio: ['pipe', 'pipe', 'inherit'] });
  children.push(child);
  const conn = rpc.createMessageConnection(
    new rpc.StreamMessageReader(child.stdout),
    new rpc.StreamMessageWriter(child.stdin),
  );
  const seen = { budget: [], compaction: [], progress: [], created: [], messages: [] };
  conn.onNotification('soba/budgetChanged', (p) => seen.budget.push(p));
  conn.onNotification('soba/compaction', (p) => seen.compaction.push(p));
  conn.onNotification('window/showMessage', (p) => seen.messages.push(p));
  conn.onNotification('$/progress', (p) => seen.progress.push(p));
  conn.onRequest('window/workDoneProgress/create', (p) => {
    seen.created.push(p.token);
    return null;
  });
  conn.listen();
  const init = await conn.sendRequest('initialize', {
    processId: process.pid,
    rootUri: null,
    capabilities: { window: { workDoneProgress: progress } },
    workspaceFolders: [{ uri: `file://${ws}`, name: path.basename(ws) }],
  });
  conn.sendNotification('initialized', {});
  return { conn, child, seen, init };
}

async function close({ conn, child }) {
  await conn.sendRequest('shutdown');
  conn.sendNotification('exit');
  await new Promise((resolve) => child.once('exit', resolve));
  conn.dispose();
}

const until = async (pred, ms = 5000) => {
  const end = Date.now() + ms;
  while (!pred()) {
    if (Date.now() > end) throw new Error('timed out waiting');
    await new Promise((r) => setTimeout(r, 20));
  }
};

const text = (role, t) => ({ type: 'message', role, content: [{ type: 'text', text: t }] });

test('open, append, budget, auto-compact, sessions and flight over vscode-jsonrpc', async () => {
  const ws = workspace('basic');
  const c = await connect(ws);
  assert.ok(c.init.capabilities.executeCommandProvider.commands.includes('soba.server.budget'));

  const opened = await c.conn.sendRequest('soba/session/open', { workspace: ws, model: { name: 'gpt-4o' } });
  assert.match(opened.sessionId, /^s_/);
  assert.equal(opened.budget.hardLimit, 128000 - 16384 - 8192);

  const appended = await c.conn.sendRequest('soba/session/append', {
    sessionId: opened.sessionId,
    entries: [text('user', 'Fix the failing auth test'), text('assistant', 'Looking at it.')],
  });
  assert.equal(appended.entryIds.length, 2);
  await until(() => c.seen.budget.some((b) => b.effectiveTokens === appended.budget.effectiveTokens));

  const budget = await c.conn.sendRequest('soba/budget', {});
  assert.equal(budget.sessionId, opened.sessionId);
  assert.equal(budget.effectiveTokens, appended.budget.effectiveTokens);

  const viaCommand = await c.conn.sendRequest('workspace/executeCommand', {
    command: 'soba.server.budget',
    arguments: [{ workspace: ws }],
  });
  assert.deepEqual(viaCommand, budget);

  assert.deepEqual(await c.conn.sendRequest('soba/autoCompact', { enabled: false }), { autoCompact: false });
  const sessions = await c.conn.sendRequest('soba/sessions', { workspace: ws });
  assert.equal(sessions.sessions.length, 1);
  assert.equal(sessions.sessions[0].active, true);

  const flight = await c.conn.sendRequest('soba/flight', { sessionId: opened.sessionId });
  assert.deepEqual(flight, { records: [] });

  await assert.rejects(c.conn.sendRequest('soba/budget', { sessionId: 's_nope' }), (e) => e.code === -32002);
  await close(c);
});

test('two clients of the shared daemon see the same session live', async () => {
  const ws = workspace('shared');
  const agent = await connect(ws);
  const editor = await connect(ws);
  const { sessionId } = await agent.conn.sendRequest('soba/session/open', { workspace: ws });
  const appended = await agent.conn.sendRequest('soba/session/append', {
    sessionId,
    entries: [text('user', 'hello from the terminal agent')],
  });
  // The editor never opened the session: it addresses its workspace's active session.
  const seenByEditor = await editor.conn.sendRequest('soba/budget', {});
  assert.equal(seenByEditor.sessionId, sessionId);
  assert.equal(seenByEditor.effectiveTokens, appended.budget.effectiveTokens);
  await until(() => editor.seen.budget.some((b) => b.sessionId === sessionId));
  await close(agent);
  await close(editor);
});

test('open → append → preflight with compaction and progress → budget → compact → flight', async () => {
  // A small window (hard limit 29808) so that three dozen messages force a compaction.
  const ws = workspace('compacting', {
    model: { name: 'gpt-4o', contextWindow: 40000, maxOutputTokens: 2000 },
    // The spec's reserve (8192), not the one SOBA scales to a window below 64k by default.
    compaction: { keepRecentTokens: 1000, minTokensForAutoCompact: 3000, minReclaimableTokens: 500, safetyReserveTokens: 8192 },
  });
  const c = await connect(ws);
  const { sessionId } = await c.conn.sendRequest('soba/session/open', { workspace: ws });
  const words = (i) => Array.from({ length: 1000 }, (_, w) => `w${(i * 7919 + w) % 9973}`).join(' ');
  const entries = Array.from({ length: 36 }, (_, i) => text(i % 2 ? 'assistant' : 'user', words(i)));
  const appended = await c.conn.sendRequest('soba/session/append', { sessionId, entries });
  assert.ok(appended.budget.effectiveTokens > appended.budget.hardLimit);

  const input = await c.conn.sendRequest('soba/preflight', { sessionId });
  assert.equal(input.compaction.outcome, 'completed');
  assert.equal(input.compaction.trigger, 'hard_limit');
  assert.ok(input.tokens <= appended.budget.hardLimit);
  assert.match(input.messages[0].content[0].text, /Context Capsule|capsule/i);

  await until(() => c.seen.compaction.some((n) => n.phase === 'end'));
  const phases = c.seen.compaction.map((n) => n.phase);
  assert.equal(phases[0], 'start');
  const end = c.seen.compaction.find((n) => n.phase === 'end');
  assert.match(end.message, /^hard_limit compact: .* tokens \(−\d+%\), ck_/);
  await until(() => c.seen.progress.some((p) => p.value.kind === 'end'));
  assert.equal(c.seen.created.length, 1);
  const begin = c.seen.progress.find((p) => p.value.kind === 'begin');
  assert.equal(begin.value.title, 'Compacting context before response (hard_limit)');

  const budget = await c.conn.sendRequest('soba/budget', { sessionId });
  assert.equal(budget.lastCompaction.checkpointId, input.compaction.checkpointId);
  assert.equal(budget.compacting, false);

  await c.conn.sendRequest('soba/session/append', { sessionId, entries: [text('user', words(40)), text('assistant', words(41))] });
  const explicit = await c.conn.sendRequest('soba/compact', { instructions: 'keep the auth details' });
  assert.equal(explicit.trigger, 'user');
  assert.ok(['completed', 'skipped'].includes(explicit.outcome), explicit.reason);

  const flight = await c.conn.sendRequest('soba/flight', { sessionId });
  assert.deepEqual(
    flight.records.map((r) => [r.operationId, r.trigger]),
    [[input.compaction.operationId, 'hard_limit'], [explicit.operationId, 'user']],
  );
  for (const r of flight.records) assert.equal(r.hardLimit, 29808);
  await close(c);
});

test('a daemon killed without cleanup leaves a stale socket that the next serve replaces', async () => {
  const ws = workspace('stale');
  const first = await connect(ws);
  const socket = path.join(env.SOBA_RUNTIME_DIR, 'soba.sock');
  assert.equal(fs.statSync(socket).mode & 0o777, 0o600);
  assert.equal(fs.statSync(env.SOBA_RUNTIME_DIR).mode & 0o777, 0o700);
  const pid = Number(fs.readFileSync(path.join(env.SOBA_RUNTIME_DIR, 'daemon.lock'), 'utf8').trim());
  process.kill(pid, 'SIGKILL');
  await new Promise((resolve) => first.child.once('exit', resolve));
  first.conn.dispose();
  assert.ok(fs.existsSync(socket), 'the killed daemon left its socket behind');

  const second = await connect(ws);
  const { sessionId } = await second.conn.sendRequest('soba/session/open', { workspace: ws });
  assert.match(sessionId, /^s_/);
  const newPid = Number(fs.readFileSync(path.join(env.SOBA_RUNTIME_DIR, 'daemon.lock'), 'utf8').trim());
  assert.notEqual(newPid, pid);
  await close(second);
});
