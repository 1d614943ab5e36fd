import assert from 'node:assert/strict';
import * as fs from 'node:fs';
import * as path from 'node:path';
import { describe, it } from 'node:test';
import { findServer, readSettings, RESTRICTED_KEYS, serverCandidates, serverCommand } from '../src/settings';
import { EXTENSION_ROOT } from './paths';

const root = EXTENSION_ROOT;

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

  it('ignores workspace values of serverPath and serverArgs in an untrusted workspace', () => {
    const workspace: Record<string, unknown> = { serverPath: '/tmp/evil/soba', serverArgs: ['--config', 'evil.json'], 'compact.mirror': true };
    const user: Record<string, unknown> = { serverPath: '/usr/local/bin/soba' };
    const untrusted = readSettings((key) => workspace[key], { trusted: false, userValue: (key) => user[key] });
    assert.deepEqual(serverCommand(untrusted), { command: '/usr/local/bin/soba', args: ['serve'] });
    assert.equal(untrusted.compactMirror, true, 'harmless settings still apply');
    const trusted = readSettings((key) => workspace[key], { trusted: true, userValue: (key) => user[key] });
    assert.deepEqual(serverCommand(trusted), { command: '/tmp/evil/soba', args: ['serve', '--config', 'evil.json'] });
  });

  it('declares limited support for untrusted workspaces and restricts exactly the program settings', () => {
    const manifest = JSON.parse(fs.readFileSync(path.join(root, 'package.json'), 'utf8'));
    const untrusted = manifest.capabilities.untrustedWorkspaces;
    assert.equal(untrusted.supported, 'limited');
    assert.match(untrusted.description, /soba trust/);
    assert.deepEqual(untrusted.restrictedConfigurations, RESTRICTED_KEYS.map((k) => `soba.${k}`));
  });

  it('finds soba in the usual install places when PATH lacks it', () => {
    const settings = readSettings(() => undefined);
    const host = (present: string[]) => ({
      path: '/usr/bin:/bin',
      home: '/home/me',
      workspaceFolders: ['/src/soba'],
      isExecutable: (file: string) => present.includes(file),
    });
    assert.deepEqual(serverCandidates(host([])), [
      '/usr/bin/soba',
      '/bin/soba',
      '/home/me/.cargo/bin/soba',
      '/usr/local/bin/soba',
      '/home/me/.local/bin/soba',
      '/src/soba/target/release/soba',
      '/src/soba/target/debug/soba',
    ]);
    assert.deepEqual(findServer(settings, host(['/home/me/.cargo/bin/soba', '/usr/local/bin/soba'])), { path: '/home/me/.cargo/bin/soba' });
    assert.deepEqual(findServer(settings, host(['/bin/soba', '/home/me/.cargo/bin/soba'])), { path: '/bin/soba' }, 'PATH first');
    assert.deepEqual(findServer(settings, host(['/src/soba/target/debug/soba'])), { path: '/src/soba/target/debug/soba' });
  });

  it('uses soba.serverPath as set, without looking', () => {
    const settings = readSettings((key) => (key === 'serverPath' ? '/opt/soba' : undefined));
    const looked: string[] = [];
    const found = findServer(settings, { path: '/bin', home: '/h', workspaceFolders: [], isExecutable: (f) => (looked.push(f), true) });
    assert.deepEqual(found, { path: '/opt/soba' });
    assert.deepEqual(looked, []);
  });

  it('asks for soba.serverPath when soba is nowhere to be found', () => {
    const found = findServer(readSettings(() => undefined), { path: undefined, home: undefined, workspaceFolders: [], isExecutable: () => false });
    assert.ok('error' in found);
    assert.match(found.error, /soba was not found \(looked in PATH, ~\/\.cargo\/bin, \/usr\/local\/bin/);
    assert.match(found.error, /set "soba\.serverPath"/);
  });
});
