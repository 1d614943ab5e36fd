// Framing and the client's connection handling, over in-memory streams.
import assert from 'node:assert/strict';
import { PassThrough } from 'node:stream';
import { test } from 'node:test';

import { encodeFrame, FrameReader, FramingError, SobaClient, SobaConnectionError } from '../src';

test('frames split across chunks and several frames in one chunk are read whole', () => {
  const r = new FrameReader();
  const a = encodeFrame({ jsonrpc: '2.0', id: 1, result: { text: 'é€😀' } });
  const b = encodeFrame({ jsonrpc: '2.0', method: 'soba/budgetChanged', params: {} });
  const all = Buffer.concat([a, b]);
  assert.deepEqual(r.push(all.subarray(0, 7)), []);
  assert.deepEqual(r.push(all.subarray(7, a.length + 3)), [{ jsonrpc: '2.0', id: 1, result: { text: 'é€😀' } }]);
  assert.deepEqual(r.push(all.subarray(a.length + 3)), [{ jsonrpc: '2.0', method: 'soba/budgetChanged', params: {} }]);
});

test('header names are read in any case, next to other headers', () => {
  const body = Buffer.from('{"id":1}');
  const frame = Buffer.concat([
    Buffer.from(`content-length: ${body.length}\r\nContent-Type: application/vscode-jsonrpc; charset=utf-8\r\n\r\n`),
    body,
  ]);
  assert.deepEqual(new FrameReader().push(frame), [{ id: 1 }]);
});

test('a header without Content-Length is a FramingError', () => {
  assert.throws(() => new FrameReader().push(Buffer.from('X-Nope: 1\r\n\r\n{}')), FramingError);
});

/** A fake daemon: answers `initialize`, then does what `script` says with each request. */
function fakeDaemon(script: (msg: { id?: number; method: string }, reply: (m: unknown) => void, end: () => void) => void) {
  const toClient = new PassThrough();
  const fromClient = new PassThrough();
  const reader = new FrameReader();
  const reply = (m: unknown) => toClient.write(encodeFrame(m));
  fromClient.on('data', (chunk: Buffer) => {
    for (const msg of reader.push(chunk) as Array<{ id?: number; method: string }>) {
      if (msg.method === 'initialize') reply({ jsonrpc: '2.0', id: msg.id, result: { capabilities: {}, serverInfo: { name: 'soba' } } });
      else script(msg, reply, () => toClient.end());
    }
  });
  return { toClient, fromClient };
}

test('a request pending when the connection ends is rejected, and so is every later one', async () => {
  const d = fakeDaemon((msg, _reply, end) => {
    if (msg.method === 'soba/preflight') end();
  });
  const c = await SobaClient.connect(d.toClient, d.fromClient);
  await assert.rejects(c.preflight({ sessionId: 's_1' }), (e: unknown) => {
    assert.ok(e instanceof SobaConnectionError);
    assert.equal(e.message, 'soba/preflight: the daemon closed the connection before answering');
    return true;
  });
  await assert.rejects(c.budget(), /^SobaConnectionError: soba\/budget: the daemon closed the connection$/);
});

test('server requests are answered: progress tokens accepted, others refused', async () => {
  const answers: unknown[] = [];
  const d = fakeDaemon((msg, reply) => {
    if (msg.method === 'soba/budget') {
      reply({ jsonrpc: '2.0', id: 100, method: 'window/workDoneProgress/create', params: { token: 't' } });
      reply({ jsonrpc: '2.0', id: 101, method: 'workspace/configuration', params: {} });
      setTimeout(() => reply({ jsonrpc: '2.0', id: msg.id, result: { ok: true } }), 20);
    } else if (msg.id === 100 || msg.id === 101) {
      answers.push(msg);
    }
  });
  const c = await SobaClient.connect(d.toClient, d.fromClient);
  assert.deepEqual(await c.budget(), { ok: true });
  assert.deepEqual(answers, [
    { jsonrpc: '2.0', id: 100, result: null },
    { jsonrpc: '2.0', id: 101, error: { code: -32601, message: 'the client does not handle workspace/configuration' } },
  ]);
});

test('unreadable bytes from the daemon end the connection with a clear error', async () => {
  const d = fakeDaemon((msg) => {
    if (msg.method === 'soba/budget') d.toClient.write('garbage\r\n\r\n');
  });
  const c = await SobaClient.connect(d.toClient, d.fromClient);
  await assert.rejects(c.budget(), /unreadable data from the daemon: frame header without a valid Content-Length/);
});
