// A whole agent session against the real daemon, through the typed client.
import assert from 'node:assert/strict';
import * as fs from 'node:fs';
import * as path from 'node:path';
import { after, test } from 'node:test';

import {
  ErrorCode,
  isBlock,
  METHODS,
  SobaClient,
  SobaConnectionError,
  SobaError,
  type AppendedEntry,
  type CompactionNotification,
  type MethodName,
  type SessionClosedNotification,
} from '../src';
import { BIN, sandbox, until, words } from './helpers';

const box = sandbox('session');
after(() => box.cleanup());

const text = (role: 'user' | 'assistant', t: string): AppendedEntry => ({
  type: 'message',
  role,
  content: [{ type: 'text', text: t }],
});

test('open, append, preflight, compaction, capsule create and export', async () => {
  const ws = box.workspace('full');
  const c = await box.connect(ws);
  assert.equal(c.serverInfo?.name, 'soba');
  const compaction: CompactionNotification[] = [];
  const closed: SessionClosedNotification[] = [];
  c.on('soba/compaction', (n) => compaction.push(n));
  c.on('soba/session/closed', (n) => closed.push(n));

  const opened = await c.openSession({ workspace: ws, model: { name: 'gpt-4o' } });
  assert.match(opened.sessionId, /^s_/);
  assert.equal(opened.budget.hardLimit, 9808);
  const { sessionId } = opened;

  const appended = await c.append({
    sessionId,
    entries: [
      { type: 'setting', systemPrompt: 'You are a careful coding agent.' },
      text('user', 'Fix the failing auth test'),
      {
        type: 'message',
        role: 'assistant',
        content: [
          { type: 'text', text: 'Running the tests.' },
          { type: 'tool_call', id: 'call_1', name: 'Bash', input: { command: 'cargo test' } },
        ],
        usage: { input: 900, cacheRead: 0, cacheWrite: 0, output: 40 },
      },
      { type: 'tool_result', callId: 'call_1', toolName: 'Bash', content: [{ type: 'text', text: '1 failed' }], isError: true },
    ],
  });
  assert.equal(appended.entryIds.length, 4);
  assert.equal(appended.leafId, appended.entryIds[3]);
  assert.equal(appended.budget.source, 'provider_usage');

  const first = await c.preflight({ sessionId });
  assert.equal(first.compaction, null);
  assert.deepEqual(
    first.messages.map((m) => m.role),
    ['user', 'assistant', 'tool'],
    'the setting is not a message: the agent sends its system prompt itself',
  );
  assert.equal(first.messages[2].toolCallId, 'call_1');
  assert.equal(first.messages[2].isError, true);
  assert.equal(first.messages[1].entryId, appended.entryIds[2]);

  // compactOnTurnComplete is on by default: a soft intent for the next preflight.
  assert.deepEqual(await c.turnComplete({ sessionId, usage: { input: 950, cacheRead: 0, cacheWrite: 0, output: 60 } }), {
    intentRecorded: true,
  });

  const big = await c.append({
    sessionId,
    entries: Array.from({ length: 12 }, (_, i) => text(i % 2 ? 'assistant' : 'user', words(i))),
  });
  assert.ok(big.budget.effectiveTokens > big.budget.hardLimit);

  const input = await c.preflight({ sessionId });
  assert.ok(input.compaction);
  assert.equal(input.compaction.outcome, 'completed');
  assert.equal(input.compaction.trigger, 'hard_limit');
  assert.ok(input.tokens <= big.budget.hardLimit);
  const capsule = input.messages[0];
  assert.equal(capsule.role, 'user');
  assert.equal(capsule.entryId, undefined, 'the capsule message comes from no entry');
  assert.match(isBlock(capsule.content[0], 'text') ? capsule.content[0].text : '', /capsule/i);
  await until(() => compaction.some((n) => n.phase === 'end'));
  assert.equal(compaction[0].phase, 'start');
  assert.match(compaction.find((n) => n.phase === 'end')!.message!, /^hard_limit compact: /);

  const budget = await c.budget({ sessionId });
  assert.equal(budget.lastCompaction?.checkpointId, input.compaction.checkpointId);

  const created = await c.capsuleCreate({ sessionId, title: 'auth fix hand-off' });
  assert.match(created.checkpointId, /^ck_/);
  const list = await c.capsuleList({ sessionId });
  assert.deepEqual(
    list.capsules.map((k) => k.trigger),
    ['hard_limit', 'handoff'],
  );
  const file = path.join(box.base, 'handoff.capsule.md');
  assert.deepEqual(await c.capsuleExport({ sessionId, checkpointId: created.checkpointId, path: file }), { path: file });
  assert.match(fs.readFileSync(file, 'utf8'), /auth fix hand-off/);

  const flight = await c.flight({ sessionId });
  assert.equal(flight.records[0].operationId, input.compaction.operationId);
  assert.equal((await c.sessions({ workspace: ws })).sessions[0].sessionId, sessionId);

  assert.deepEqual(await c.closeSession({ sessionId }), { sessionId, path: opened.path });
  await until(() => closed.length === 1);
  assert.deepEqual(closed[0], { sessionId, workspace: ws, reason: 'closed' });
});

test('daemon errors arrive as SobaError with the stable code and data', async () => {
  const ws = box.workspace('errors');
  const c = await box.connect(ws);
  await assert.rejects(c.preflight({ sessionId: 's_nope' }), (e: unknown) => {
    assert.ok(e instanceof SobaError);
    assert.equal(e.code, ErrorCode.UnknownSession);
    assert.equal(e.method, 'soba/preflight');
    assert.match(e.message, /soba\/session\/open/);
    return true;
  });
  const { sessionId } = await c.openSession({ workspace: ws });
  await assert.rejects(
    // A capsule is written by the daemon only; the types forbid it, the daemon refuses it too.
    c.request('soba/session/append', { sessionId, entries: [{ type: 'capsule' } as unknown as AppendedEntry] }),
    (e: unknown) => e instanceof SobaError && e.code === ErrorCode.InvalidParams && /written by the daemon/.test(e.message),
  );
  await c.append({ sessionId, entries: [text('user', words(1)), text('assistant', words(2))] });
  const recovered = await c.overflow({ sessionId });
  assert.equal(recovered.compaction.trigger, 'context_overflow');
  await assert.rejects(c.overflow({ sessionId }), (e: unknown) => {
    assert.ok(e instanceof SobaError);
    assert.equal(e.code, ErrorCode.OverflowRetryUsed);
    assert.equal((e.data as { compaction: { trigger: string } }).compaction.trigger, 'context_overflow');
    return true;
  });
});

test('session settings layer over the config for that session only', async () => {
  const ws = box.workspace('settings');
  const c = await box.connect(ws);
  const tuned = await c.openSession({ workspace: ws, compaction: { safetyReserveTokens: 1000, auto: false } });
  const plain = await c.openSession({ workspace: ws });
  assert.equal(tuned.budget.hardLimit, 17000);
  assert.equal(plain.budget.hardLimit, 9808);
  assert.equal((await c.budget({ sessionId: tuned.sessionId })).autoCompact, false);
  await assert.rejects(
    c.openSession({ workspace: ws, compaction: { keepRecentTokens: 'lots' as unknown as number } }),
    (e: unknown) =>
      e instanceof SobaError && e.code === ErrorCode.InvalidParams && /compaction\.keepRecentTokens/.test(e.message),
  );
});

test('every method has a typed wrapper on the client', async () => {
  const wrappers: Record<MethodName, keyof SobaClient> = {
    'soba/session/open': 'openSession',
    'soba/session/append': 'append',
    'soba/preflight': 'preflight',
    'soba/turn/complete': 'turnComplete',
    'soba/checkpoint': 'checkpoint',
    'soba/overflow': 'overflow',
    'soba/cancel': 'cancel',
    'soba/rewind': 'rewind',
    'soba/session/close': 'closeSession',
    'soba/budget': 'budget',
    'soba/context': 'context',
    'soba/attach': 'attach',
    'soba/compact': 'compact',
    'soba/autoCompact': 'autoCompact',
    'soba/sessions': 'sessions',
    'soba/flight': 'flight',
    'soba/capsule/create': 'capsuleCreate',
    'soba/capsule/export': 'capsuleExport',
    'soba/capsule/load': 'capsuleLoad',
    'soba/capsule/list': 'capsuleList',
    'soba/preview': 'preview',
  };
  assert.deepEqual(Object.keys(wrappers).sort(), [...METHODS].sort());
  const ws = box.workspace('wrappers');
  const c = await box.connect(ws);
  const init = c.initializeResult as { capabilities: { executeCommandProvider: { commands: string[] } } };
  const offered = init.capabilities.executeCommandProvider.commands.map(
    (cmd) => `soba/${cmd.slice('soba.server.'.length).replaceAll('.', '/')}`,
  );
  assert.deepEqual(offered.sort(), [...METHODS].sort(), 'the daemon serves exactly the generated methods');
  for (const name of Object.values(wrappers)) assert.equal(typeof c[name], 'function', name);
});

test('a daemon that goes away fails later requests with SobaConnectionError', async () => {
  const ws = box.workspace('gone');
  const c = await box.connect(ws, { args: ['--standalone'] });
  const { sessionId } = await c.openSession({ workspace: ws });
  const child = (c as unknown as { child: import('node:child_process').ChildProcess }).child;
  const exited = new Promise((resolve) => child.once('exit', resolve));
  child.kill('SIGKILL');
  await exited;
  await assert.rejects(c.budget({ sessionId }), (e: unknown) => {
    assert.ok(e instanceof SobaConnectionError);
    assert.match(e.message, /^soba\/budget: (`.* serve` was killed by SIGKILL|the daemon closed the connection)/);
    return true;
  });
});

test('a missing binary is a clear SobaConnectionError', async () => {
  await assert.rejects(
    SobaClient.spawn({ bin: path.join(box.base, 'no-such-soba'), env: box.env }),
    (e: unknown) => {
      assert.ok(e instanceof SobaConnectionError);
      assert.match(e.reason, /^cannot start `.*no-such-soba serve`: spawn .*ENOENT$/);
      return true;
    },
  );
  assert.ok(fs.existsSync(BIN), `the tests drive ${BIN}`);
});
