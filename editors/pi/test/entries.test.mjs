// pi entries → SOBA entries, sync plans, and SOBA's input → pi's compaction (dist/entries.js).
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { toSobaEntry, planSync, fullSync, compactionFromInput, sobaMark, CutError } from '../dist/entries.js';

const ts = '2026-01-01T00:00:00.000Z';
const msg = (id, message, parentId = null) => ({ type: 'message', id, parentId, timestamp: ts, message });
const user = (id, text) => msg(id, { role: 'user', content: text });
const assistant = (id, content, extra = {}) => msg(id, { role: 'assistant', content, ...extra });
const toolResult = (id, callId, text) =>
  msg(id, { role: 'toolResult', toolCallId: callId, toolName: 'read', content: [{ type: 'text', text }], isError: false });
const sobaCompaction = (id, sessionId, checkpointId) => ({
  type: 'compaction', id, summary: 's', firstKeptEntryId: 'x', tokensBefore: 1, details: { soba: { sessionId, checkpointId } },
});

test('user, assistant and tool result messages keep their pi ids and content', () => {
  assert.deepEqual(toSobaEntry(user('u1', 'fix it')), {
    id: 'u1', ts, type: 'message', role: 'user', content: [{ type: 'text', text: 'fix it' }],
  });
  const a = toSobaEntry(
    assistant(
      'a1',
      [
        { type: 'thinking', thinking: 'hmm' },
        { type: 'text', text: 'reading' },
        { type: 'toolCall', id: 'call_1', name: 'read', arguments: { path: 'a.rs' } },
      ],
      { model: 'm', usage: { input: 10, output: 5, cacheRead: 100, cacheWrite: 0, totalTokens: 115 } },
    ),
  );
  assert.deepEqual(a, {
    id: 'a1', ts, type: 'message', role: 'assistant', model: 'm',
    content: [
      { type: 'thinking', thinking: 'hmm' },
      { type: 'text', text: 'reading' },
      { type: 'tool_call', id: 'call_1', name: 'read', input: { path: 'a.rs' } },
    ],
    usage: { input: 10, cacheRead: 100, cacheWrite: 0, output: 5 },
  });
  assert.deepEqual(toSobaEntry(toolResult('t1', 'call_1', 'fn main')), {
    id: 't1', ts, type: 'tool_result', callId: 'call_1', toolName: 'read',
    content: [{ type: 'text', text: 'fn main' }], isError: false,
  });
});

test('an aborted response reports no usage, so none is recorded', () => {
  const e = toSobaEntry(assistant('a1', [], { usage: { input: 0, output: 0, cacheRead: 0, cacheWrite: 0 }, stopReason: 'aborted' }));
  assert.equal(e.usage, undefined);
});

test('user shell commands, extension messages and branch summaries reach SOBA as pi sends them', () => {
  const bash = toSobaEntry(msg('b1', { role: 'bashExecution', command: 'make', output: 'boom', exitCode: 2 }));
  assert.equal(bash.role, 'user');
  assert.equal(bash.synthetic, true);
  assert.equal(bash.content[0].text, 'Ran `make`\n```\nboom\n```\n\nCommand exited with code 2');
  assert.equal(toSobaEntry(msg('b2', { role: 'bashExecution', command: 'ls', output: '', excludeFromContext: true })), undefined);
  const custom = toSobaEntry({ type: 'custom_message', id: 'c1', customType: 'x', content: 'from an extension', display: true });
  assert.deepEqual(custom.content, [{ type: 'text', text: 'from an extension' }]);
  const branch = toSobaEntry({ type: 'branch_summary', id: 'bs', fromId: 'z', summary: 'tried X' });
  assert.match(branch.content[0].text, /came back from:\n\n<summary>\ntried X<\/summary>$/);
});

test('settings, labels and compactions are not model input', () => {
  for (const type of ['model_change', 'thinking_level_change', 'label', 'custom', 'session_info', 'compaction']) {
    assert.equal(toSobaEntry({ type, id: 'x' }), undefined, type);
  }
});

test('a branch without a SOBA compaction goes whole into a new session', () => {
  const branch = [{ type: 'model_change', id: 'm' }, user('u1', 'a'), assistant('a1', [{ type: 'text', text: 'b' }])];
  const plan = planSync(branch);
  assert.equal(plan.resume, undefined);
  assert.deepEqual(plan.entries.map((e) => e.id), ['u1', 'a1']);
});

test("a branch resumes after its latest SOBA compaction, past pi's own ones", () => {
  const branch = [
    user('u1', 'a'),
    sobaCompaction('c1', 's_old', 'ck_1'),
    user('u2', 'b'),
    sobaCompaction('c2', 's_1', 'ck_2'),
    user('u3', 'c'),
    { type: 'compaction', id: 'c3', summary: 'pi', firstKeptEntryId: 'u3', tokensBefore: 1, details: { readFiles: [] } },
    user('u4', 'd'),
  ];
  const plan = planSync(branch);
  assert.deepEqual(plan.resume, { sessionId: 's_1', checkpointId: 'ck_2' });
  assert.deepEqual(plan.entries.map((e) => e.id), ['u3', 'u4']);
  assert.deepEqual(fullSync(branch).map((e) => e.id), ['u1', 'u2', 'u3', 'u4']);
  assert.equal(sobaMark(branch[5]), undefined);
});

const capsule = { role: 'user', content: [{ type: 'text', text: '# Context Capsule ck_1\nstate' }] };

test("the capsule is the summary and SOBA's first kept entry the cut", () => {
  const branch = [user('u1', 'a'), assistant('a1', []), user('u2', 'b'), assistant('a2', [])];
  const r = compactionFromInput([capsule, { role: 'user', content: [], entryId: 'u2' }, { role: 'assistant', content: [], entryId: 'a2' }], branch);
  assert.deepEqual(r, { summary: '# Context Capsule ck_1\nstate', firstKeptEntryId: 'u2' });
});

test('a kept tool result moves the cut back to its call, never onto the result', () => {
  const branch = [user('u1', 'a'), assistant('a1', [{ type: 'toolCall', id: 'k', name: 'read', arguments: {} }]), toolResult('t1', 'k', 'x'), assistant('a2', [])];
  const r = compactionFromInput([capsule, { role: 'tool', content: [], entryId: 't1' }], branch);
  assert.equal(r.firstKeptEntryId, 'a1');
});

test('entries SOBA keeps that pi does not know (file changes) are passed over', () => {
  const branch = [user('u1', 'a'), assistant('a1', [])];
  const r = compactionFromInput([capsule, { role: 'user', content: [], entryId: 'e_file' }, { role: 'assistant', content: [], entryId: 'a1' }], branch);
  assert.equal(r.firstKeptEntryId, 'a1');
});

test('an input without a capsule, or with nothing kept, is refused with the reason', () => {
  const branch = [user('u1', 'a')];
  assert.throws(() => compactionFromInput([{ role: 'user', content: [], entryId: 'u1' }], branch), CutError);
  assert.throws(() => compactionFromInput([capsule], branch), /kept no entry of this branch/);
  assert.throws(() => compactionFromInput([{ role: 'user', content: [] }], branch), /no text/);
});
