// compactWithSoba against a scripted daemon: which requests it sends, in which order, and how
// it answers what the daemon says (dist/compact.js).
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { isContextOverflow } from '@mariozechner/pi-ai';
import { compactWithSoba, piReason, SobaDeclined, SyncMemory, triggerOf } from '../dist/compact.js';

const user = (id, text) => ({ type: 'message', id, message: { role: 'user', content: text } });
const assistant = (id, text) => ({ type: 'message', id, message: { role: 'assistant', content: [{ type: 'text', text }] } });
const mark = (id, sessionId, checkpointId) => ({ type: 'compaction', id, summary: 'c', firstKeptEntryId: 'u1', tokensBefore: 9, details: { soba: { sessionId, checkpointId } } });

/** A daemon that records requests and answers from `answers[method]` (a value or a function). */
function daemon(answers) {
  const calls = [];
  return {
    calls,
    async request(method, params) {
      calls.push({ method, params });
      const a = answers[method];
      if (a === undefined) throw new Error(`unexpected ${method}`);
      return typeof a === 'function' ? a(params) : a;
    },
  };
}

const completed = { outcome: 'completed', checkpointId: 'ck_new', quality: 'model', tokensBefore: 900, tokensAfter: 300 };
const input = (branch, extra = {}) => ({ workspace: '/w', branch, tokensBefore: 1234, ...extra });
const preflight = (firstKept) => ({
  messages: [{ role: 'user', content: [{ type: 'text', text: '# Context Capsule ck_new' }] }, { role: 'user', content: [], entryId: firstKept }],
});
const rpcError = (code, message) => Object.assign(new Error(message), { code });

test('a first compaction opens a session with the model, sends the branch, and returns capsule and cut', async () => {
  const d = daemon({
    'soba/session/open': { sessionId: 's_1' },
    'soba/session/append': {},
    'soba/compact': completed,
    'soba/preflight': preflight('u2'),
  });
  const branch = [user('u1', 'a'), assistant('a1', 'b'), user('u2', 'c'), assistant('a2', 'd')];
  const model = { name: 'fake', contextWindow: 16000, maxOutputTokens: 1000 };
  const r = await compactWithSoba(d, input(branch, { instructions: 'keep the auth details', model }), new SyncMemory());
  assert.deepEqual(d.calls.map((c) => c.method), ['soba/session/open', 'soba/session/append', 'soba/compact', 'soba/preflight']);
  assert.deepEqual(d.calls[0].params, { workspace: '/w', model });
  assert.deepEqual(d.calls[1].params.entries.map((e) => e.id), ['u1', 'a1', 'u2', 'a2']);
  assert.deepEqual(d.calls[2].params, { sessionId: 's_1', instructions: 'keep the auth details' });
  assert.deepEqual(r, {
    summary: '# Context Capsule ck_new',
    firstKeptEntryId: 'u2',
    tokensBefore: 1234,
    details: { soba: { sessionId: 's_1', checkpointId: 'ck_new', quality: 'model', tokensBefore: 900, tokensAfter: 300 } },
  });
});

test('the next compaction in the same process appends only new entries, after the leaf', async () => {
  const memory = new SyncMemory();
  memory.compacted('s_1', 'ck_1');
  const d = daemon({
    'soba/session/open': { sessionId: 's_1' },
    'soba/session/append': {},
    'soba/compact': completed,
    'soba/preflight': preflight('u3'),
  });
  const branch = [user('u1', 'a'), mark('c1', 's_1', 'ck_1'), user('u2', 'b'), assistant('a2', 'c'), user('u3', 'd')];
  await compactWithSoba(d, input(branch), memory);
  assert.deepEqual(d.calls[0].params, { workspace: '/w', sessionId: 's_1', create: false });
  const appended = d.calls[1].params.entries;
  assert.deepEqual(appended.map((e) => e.id), ['u2', 'a2', 'u3']);
  assert.equal(appended[0].parentId, undefined);
  // The capsule it just wrote is now the one to continue from.
  assert.ok(memory.appendedAfter('s_1', 'ck_new'));
  assert.equal(memory.appendedAfter('s_1', 'ck_1'), undefined);
});

test('entries already sent by a compaction SOBA declined are not sent again', async () => {
  const memory = new SyncMemory();
  memory.compacted('s_1', 'ck_1');
  const branch = [user('u1', 'a'), mark('c1', 's_1', 'ck_1'), user('u2', 'b')];
  const declined = daemon({
    'soba/session/open': { sessionId: 's_1' },
    'soba/session/append': {},
    'soba/compact': { outcome: 'skipped', reason: 'nothing before the retained window' },
  });
  await assert.rejects(compactWithSoba(declined, input(branch), memory), (e) =>
    e instanceof SobaDeclined && e.message === "SOBA's compaction ended skipped: nothing before the retained window");
  const d = daemon({ 'soba/session/open': {}, 'soba/session/append': {}, 'soba/compact': completed, 'soba/preflight': preflight('u3') });
  await compactWithSoba(d, input([...branch, user('u3', 'c')]), memory);
  assert.deepEqual(d.calls[1].params.entries.map((e) => e.id), ['u3']);
});

test('another pi process continues right after the capsule, found by its checkpoint', async () => {
  const d = daemon({
    'soba/session/open': { sessionId: 's_1' },
    'soba/capsule/list': { capsules: [{ checkpointId: 'ck_0', entryId: 'e_0' }, { checkpointId: 'ck_1', entryId: 'e_cap' }] },
    'soba/session/append': {},
    'soba/compact': completed,
    'soba/preflight': preflight('u3'),
  });
  const branch = [user('u1', 'a'), mark('c1', 's_1', 'ck_1'), user('u2', 'b'), user('u3', 'c')];
  await compactWithSoba(d, input(branch), new SyncMemory());
  assert.deepEqual(d.calls.map((c) => c.method).slice(0, 3), ['soba/session/open', 'soba/capsule/list', 'soba/session/append']);
  const [first, second] = d.calls[2].params.entries;
  assert.equal(first.parentId, 'e_cap');
  assert.equal(second.parentId, undefined);
});

for (const [why, answers] of [
  ['its session is gone', { 'soba/session/open': (p) => { if (p.sessionId) throw rpcError(-32002, 'unknown session'); return { sessionId: 's_2' }; } }],
  ['its capsule is not in the session', { 'soba/session/open': (p) => ({ sessionId: p.sessionId ?? 's_2' }), 'soba/capsule/list': { capsules: [] } }],
  ['the session refuses the entries', {
    'soba/session/open': (p) => ({ sessionId: p.sessionId ?? 's_2' }),
    'soba/capsule/list': { capsules: [{ checkpointId: 'ck_1', entryId: 'e_cap' }] },
    'soba/session/append': (p) => { if (p.sessionId === 's_1') throw rpcError(-32602, 'entries[0]: duplicate id'); return {}; },
  }],
]) {
  test(`a branch starts a new SOBA session when ${why}`, async () => {
    const d = daemon({ 'soba/session/append': {}, 'soba/compact': completed, 'soba/preflight': preflight('u2'), ...answers });
    const branch = [user('u1', 'a'), mark('c1', 's_1', 'ck_1'), user('u2', 'b')];
    const r = await compactWithSoba(d, input(branch), new SyncMemory());
    const fresh = d.calls.find((c) => c.method === 'soba/session/open' && !c.params.sessionId);
    assert.ok(fresh);
    const full = d.calls.findLast((c) => c.method === 'soba/session/append');
    assert.deepEqual(full.params, { sessionId: 's_2', entries: full.params.entries });
    assert.deepEqual(full.params.entries.map((e) => e.id), ['u1', 'u2']);
    assert.equal(r.details.soba.sessionId, 's_2');
  });
}

test('other daemon errors are not papered over', async () => {
  const d = daemon({ 'soba/session/open': () => { throw rpcError(-32004, 'the session log is locked by another writer'); } });
  await assert.rejects(compactWithSoba(d, input([user('u1', 'a')]), new SyncMemory()), (e) => e.code === -32004);
});

test('a compaction that ends failed or without a checkpoint is declined with its reason', async () => {
  for (const outcome of [{ outcome: 'failed', reason: 'capsule invalid' }, { outcome: 'completed', checkpointId: null }]) {
    const d = daemon({ 'soba/session/open': { sessionId: 's_1' }, 'soba/session/append': {}, 'soba/compact': outcome });
    await assert.rejects(compactWithSoba(d, input([user('u1', 'a')]), new SyncMemory()), SobaDeclined);
  }
});

test('an input SOBA cannot map onto the branch is declined', async () => {
  const d = daemon({
    'soba/session/open': { sessionId: 's_1' },
    'soba/session/append': {},
    'soba/compact': completed,
    'soba/preflight': { messages: [{ role: 'user', content: [{ type: 'text', text: 'capsule' }] }] },
  });
  await assert.rejects(compactWithSoba(d, input([user('u1', 'a')]), new SyncMemory()), /kept no entry/);
});

test("pi's reason goes to soba/compact as SOBA's trigger; a /compact sends none", async () => {
  assert.deepEqual(
    ['manual', 'threshold', 'overflow'].map(triggerOf),
    ['user', 'auto_threshold', 'context_overflow'],
  );
  for (const [trigger, sent] of [
    ['auto_threshold', { trigger: 'auto_threshold' }],
    ['context_overflow', { trigger: 'context_overflow' }],
    ['user', {}],
    [undefined, {}],
  ]) {
    const d = daemon({
      'soba/session/open': { sessionId: 's_1' },
      'soba/session/append': {},
      'soba/compact': completed,
      'soba/preflight': preflight('u2'),
    });
    const branch = [user('u1', 'a'), assistant('a1', 'b'), user('u2', 'c')];
    await compactWithSoba(d, input(branch, trigger ? { trigger } : {}), new SyncMemory());
    assert.deepEqual(d.calls[2].params, { sessionId: 's_1', ...sent }, String(trigger));
  }
});

test("pi's reason is read as pi decides it: instructions, overflow of its model, threshold", () => {
  const model = { provider: 'fake', id: 'm1', contextWindow: 16000 };
  const settings = { enabled: true, reserveTokens: 4000, keepRecentTokens: 2000 };
  const overflowed = {
    type: 'message',
    id: 'a2',
    message: {
      role: 'assistant',
      content: [],
      provider: 'fake',
      model: 'm1',
      stopReason: 'error',
      errorMessage: 'prompt is too long: 17000 tokens > 16000 maximum',
    },
  };
  const branch = [user('u1', 'a'), assistant('a1', 'b'), user('u2', 'c')];
  const reason = (extra) =>
    piReason({ branch, tokensBefore: 5000, settings, model, ...extra }, isContextOverflow);
  // Below the threshold with nothing overflowing: only `/compact` compacts.
  assert.equal(reason({}), 'manual');
  // Past contextWindow - reserveTokens: pi's threshold.
  assert.equal(reason({ tokensBefore: 12001 }), 'threshold');
  assert.equal(reason({ tokensBefore: 12000 }), 'manual');
  // The model pi runs answered with a context overflow.
  assert.equal(reason({ branch: [...branch, overflowed], tokensBefore: 15000 }), 'overflow');
  // Another model's overflow, or one before the latest compaction, is not pi's reason now.
  assert.equal(reason({ branch: [...branch, overflowed], model: { ...model, id: 'm2' } }), 'manual');
  assert.equal(reason({ branch: [...branch, overflowed, mark('c1', 's_1', 'ck_1')] }), 'manual');
  // Instructions come only with /compact; with automatic compaction off pi never compacts alone.
  assert.equal(reason({ tokensBefore: 15000, customInstructions: 'keep auth' }), 'manual');
  assert.equal(reason({ branch: [...branch, overflowed], settings: { ...settings, enabled: false } }), 'manual');
});
