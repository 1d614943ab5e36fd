// The daemon connection (dist/client.js, dist/framing.js): framing, a daemon that is missing,
// fails or stays silent, and error answers of the real daemon.
import { test, after } from 'node:test';
import assert from 'node:assert/strict';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { encode, FrameReader } from '../dist/framing.js';
import { SobaConnection, SobaUnavailable, SobaError } from '../dist/client.js';

const dir = fs.realpathSync(fs.mkdtempSync(path.join(os.tmpdir(), 'soba-pi-client-')));
after(() => fs.rmSync(dir, { recursive: true, force: true }));

function script(name, body) {
  const file = path.join(dir, name);
  fs.writeFileSync(file, `#!/bin/sh\n${body}\n`, { mode: 0o755 });
  return file;
}

test('frames split anywhere are read whole; a frame that is not JSON is reported and skipped', () => {
  const got = [];
  const bad = [];
  const r = new FrameReader((m) => got.push(m), (why) => bad.push(why));
  const bytes = Buffer.concat([
    encode({ id: 1, result: 'é' }),
    Buffer.from('Content-Length: 3\r\n\r\n{x}'),
    encode({ id: 2, result: null }),
  ]);
  for (let i = 0; i < bytes.length; i += 5) r.push(bytes.subarray(i, i + 5));
  assert.deepEqual(got, [{ id: 1, result: 'é' }, { id: 2, result: null }]);
  assert.equal(bad.length, 1);
  assert.match(bad[0], /not JSON/);
});

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
