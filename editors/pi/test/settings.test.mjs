// Settings from the environment pi runs in (dist/index.js).
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { settingsFrom } from '../dist/index.js';

test("soba from PATH, a 60 s deadline and pi's model for capsules unless the environment says otherwise", () => {
  assert.deepEqual(settingsFrom({}), { bin: 'soba', timeoutMs: 60000, piModel: true });
  assert.deepEqual(settingsFrom({ SOBA_BIN: '/opt/soba', SOBA_PI_TIMEOUT_MS: '2500', SOBA_PI_LOCAL_CAPSULES: '1' }), {
    bin: '/opt/soba',
    timeoutMs: 2500,
    piModel: false,
  });
});

test('a deadline that is not a positive number is ignored', () => {
  for (const bad of ['', 'soon', '0', '-5']) {
    assert.equal(settingsFrom({ SOBA_PI_TIMEOUT_MS: bad }).timeoutMs, 60000, bad);
  }
});
