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

test("the daemon's soba/summarize is offered at initialize and served; $/cancelRequest aborts it", async () => {
  let offer: unknown;
  const answers = new Map<number, unknown>();
  const toClient = new PassThrough();
  const fromClient = new PassThrough();
  const reader = new FrameReader();
  const reply = (m: unknown) => toClient.write(encodeFrame(m));
  const allAnswered = new Promise<void>((resolve) => {
    fromClient.on('data', (chunk: Buffer) => {
      for (const msg of reader.push(chunk) as Array<{ id?: number; method?: string; params?: any }>) {
        if (msg.method === 'initialize') {
          offer = msg.params.capabilities.experimental?.soba?.summarize;
          reply({ jsonrpc: '2.0', id: msg.id, result: { capabilities: {} } });
          const p = { sessionId: 's_1', operationId: 'op_1', system: 'sys', maxOutputTokens: 100 };
          reply({ jsonrpc: '2.0', id: 7, method: 'soba/summarize', params: { ...p, user: 'quick' } });
          reply({ jsonrpc: '2.0', id: 8, method: 'soba/summarize', params: { ...p, user: 'slow' } });
          reply({ jsonrpc: '2.0', id: 9, method: 'soba/summarize', params: { ...p, user: 'refused' } });
          reply({ jsonrpc: '2.0', method: '$/cancelRequest', params: { id: 8 } });
        } else if (msg.method === undefined && msg.id !== undefined) {
          answers.set(msg.id, msg);
          if (answers.size === 3) resolve();
        }
      }
    });
  });
  const seen: string[] = [];
  await SobaClient.connect(toClient, fromClient, {
    summarizeOffer: { model: 'small-model' },
    summarize: (params, signal) => {
      seen.push(params.user);
      if (params.user === 'quick') return Promise.resolve({ text: 'summary of quick', hitOutputLimit: false });
      if (params.user === 'refused') return Promise.reject(Object.assign(new Error('rate limited'), { status: 429 }));
      return new Promise((_, reject) => signal.addEventListener('abort', () => reject(new Error('aborted: the daemon stopped waiting'))));
    },
  });
  await allAnswered;
  assert.deepEqual(offer, { model: 'small-model' });
  assert.deepEqual(seen, ['quick', 'slow', 'refused']);
  assert.deepEqual(answers.get(7), { jsonrpc: '2.0', id: 7, result: { text: 'summary of quick', hitOutputLimit: false } });
  assert.deepEqual(answers.get(8), { jsonrpc: '2.0', id: 8, error: { code: -32803, message: 'aborted: the daemon stopped waiting' } });
  assert.deepEqual(answers.get(9), { jsonrpc: '2.0', id: 9, error: { code: -32803, message: 'rate limited', data: { status: 429 } } });
});

test('a daemon silent past requestTimeoutMs fails the connection', async () => {
  const d = fakeDaemon(() => {});
  const c = await SobaClient.connect(d.toClient, d.fromClient, { requestTimeoutMs: 50 });
  await assert.rejects(c.budget(), (e: unknown) => {
    assert.ok(e instanceof SobaConnectionError);
    assert.equal(e.reason, 'no answer to soba/budget within 0.05s from the daemon');
    return true;
  });
  assert.equal(c.alive, false);
  await assert.rejects(c.sessions(), SobaConnectionError);
});
