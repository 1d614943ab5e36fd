import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { readSettings, serverCommand } from '../src/settings';

describe('settings', () => {
  it('defaults to soba from PATH with nothing set', () => {
    const settings = readSettings(() => undefined);
    assert.deepEqual(settings, { serverPath: '', serverArgs: [], statusBarEnabled: true, flightRecordLimit: 50, compactMirror: false });
    assert.deepEqual(serverCommand(settings), { command: 'soba', args: ['serve'] });
  });

  it('starts the configured binary with the extra arguments after serve', () => {
    const values: Record<string, unknown> = {
      serverPath: '  /opt/soba/bin/soba ',
      serverArgs: ['--config', '/etc/soba.json', 7],
      'statusBar.enabled': false,
      'flightRecords.limit': 12.7,
      'compact.mirror': true,
    };
    const settings = readSettings((key) => values[key]);
    assert.deepEqual(serverCommand(settings), { command: '/opt/soba/bin/soba', args: ['serve', '--config', '/etc/soba.json'] });
    assert.equal(settings.statusBarEnabled, false);
    assert.equal(settings.flightRecordLimit, 12);
    assert.equal(settings.compactMirror, true);
  });

  it('falls back to defaults on values of the wrong type', () => {
    const settings = readSettings((key) => (key === 'flightRecords.limit' ? -3 : key === 'statusBar.enabled' ? 'yes' : 42));
    assert.equal(settings.flightRecordLimit, 50);
    assert.equal(settings.statusBarEnabled, true);
    assert.equal(settings.serverPath, '');
    assert.deepEqual(settings.serverArgs, []);
  });
});
