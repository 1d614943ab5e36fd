// Settings from the environment pi runs in (dist/index.js).
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { settingsFrom } from '../dist/index.js';

test('soba from PATH and a 60 s deadline unless the environment says otherwise', () => {
  assert.deepEqual(settingsFrom({}), { bin: 'soba', timeoutMs: 60000 });
  assert.deepEqual(settingsFrom({ SOBA_BIN: '/opt/soba', SOBA_PI_TIMEOUT_MS: '2500' }), { bin: '/opt/soba', timeoutMs: 2500 });
});

test('a deadline that is not a positive number is ignored', () => {
  for (const bad of ['', 'soon', '0', '-5']) {
    assert.equal(settingsFrom({ SOBA_PI_TIMEOUT_MS: bad }).timeoutMs, 60000, bad);
  }
});
