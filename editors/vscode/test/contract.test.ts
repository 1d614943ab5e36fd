// package.json is a contract with VS Code: what it contributes must be what the code registers
// and reads, and nothing may clash with the daemon's own `soba.server.*` commands.

import assert from 'node:assert/strict';
import * as fs from 'node:fs';
import * as path from 'node:path';
import { describe, it } from 'node:test';
import { COMMAND_IDS, commandHandlers, type CommandContext } from '../src/commands';
import { readSettings, SETTING_KEYS } from '../src/settings';
import { CompactionProgress } from '../src/status';
import { VIEW_IDS } from '../src/views';
import { EXTENSION_ROOT } from './paths';

const root = EXTENSION_ROOT;
const manifest = JSON.parse(fs.readFileSync(path.join(root, 'package.json'), 'utf8'));
const contributes = manifest.contributes;

const fakeContext: CommandContext = {
  ui: {} as CommandContext['ui'],
  client: () => undefined,
  target: () => ({}),
  settings: () => readSettings(() => undefined),
  progress: new CompactionProgress(),
  refresh: () => undefined,
  shownBudget: () => undefined,
};

describe('package.json contract', () => {
  it('contributes exactly the commands the extension registers', () => {
    const contributed = contributes.commands.map((c: { command: string }) => c.command).sort();
    const registered = Object.keys(commandHandlers(fakeContext)).sort();
    assert.deepEqual(contributed, registered);
    assert.deepEqual([...COMMAND_IDS].sort(), registered);
  });

  it('registers the handlers in extension.ts from the same table', () => {
    const source = fs.readFileSync(path.join(root, 'src', 'extension.ts'), 'utf8');
    assert.match(source, /Object\.entries\(commandHandlers\(ctx\)\)\.map\(\(\[id, handler\]\) => vscode\.commands\.registerCommand\(id, handler\)\)/);
    assert.doesNotMatch(source, /registerCommand\(['"]/, 'register commands through commandHandlers only');
  });

  it('keeps clear of the daemon command namespace and titles every command for the palette', () => {
    for (const c of contributes.commands) {
      assert.ok(!c.command.startsWith('soba.server.'), `${c.command} clashes with the daemon's commands`);
      assert.equal(c.category, 'SOBA');
      assert.ok(c.title.length > 0);
    }
  });

  it('refers only to contributed commands from menus and views', () => {
    const known = new Set(contributes.commands.map((c: { command: string }) => c.command));
    for (const entries of Object.values(contributes.menus) as Array<Array<{ command: string }>>) {
      for (const entry of entries) assert.ok(known.has(entry.command), `menu refers to ${entry.command}`);
    }
    const views = Object.values(contributes.views).flat() as Array<{ id: string }>;
    assert.deepEqual(views.map((v) => v.id).sort(), Object.values(VIEW_IDS).sort());
    assert.equal(manifest.main, './dist/extension.js');
  });

  it('offers only the applicable auto-compact command in the palette', () => {
    const palette = contributes.menus.commandPalette as Array<{ command: string; when: string }>;
    const when = (id: string) => palette.find((entry) => entry.command === id)?.when;
    // A followed agent compacts its session itself: neither toggle is offered there.
    assert.equal(when('soba.autoCompactOn'), 'soba.hasSession && !soba.autoCompact && !soba.followed');
    assert.equal(when('soba.autoCompactOff'), 'soba.hasSession && soba.autoCompact && !soba.followed');
    const source = fs.readFileSync(path.join(root, 'src', 'extension.ts'), 'utf8');
    for (const key of ['soba.hasSession', 'soba.autoCompact', 'soba.followed']) {
      assert.match(source, new RegExp(`executeCommand\\('setContext', '${key.replace('.', '\\.')}'`), `extension.ts sets ${key}`);
    }
  });

  it('contributes, with a description, exactly the settings the code reads', () => {
    const properties = contributes.configuration.properties as Record<string, { description?: string; markdownDescription?: string }>;
    assert.deepEqual(Object.keys(properties).sort(), SETTING_KEYS.map((k) => `soba.${k}`).sort());
    for (const [key, property] of Object.entries(properties)) {
      assert.ok((property.description ?? property.markdownDescription ?? '').length > 20, `${key} needs a description`);
    }
    const read: string[] = [];
    readSettings((key) => void read.push(key));
    assert.deepEqual(read.sort(), [...SETTING_KEYS].sort());
  });

  it('validates .soba/config.json with the schema the build copies into the extension', () => {
    assert.deepEqual(contributes.jsonValidation, [{ fileMatch: '.soba/config.json', url: './schemas/config.schema.json' }]);
    const script = fs.readFileSync(path.join(root, 'scripts', 'build'), 'utf8');
    assert.match(script, /schemas\/config\.schema\.json/);
    const repoSchema = path.resolve(root, '..', '..', 'schemas', 'config.schema.json');
    if (fs.existsSync(repoSchema)) {
      assert.deepEqual(fs.readFileSync(path.join(root, 'schemas', 'config.schema.json')), fs.readFileSync(repoSchema));
    }
  });
});
