// Loads the esbuild bundle (dist/extension.js) the way VS Code would, with a recording stand-in for
// the `vscode` module, and checks what activation wires up: every contributed command, view and
// setting, the status bar item, and a clear error when the daemon cannot be started.

import assert from 'node:assert/strict';
import * as fs from 'node:fs';
import Module from 'node:module';
import * as path from 'node:path';
import * as os from 'node:os';
import { describe, it } from 'node:test';
import { pathToFileURL } from 'node:url';
import { SETTING_KEYS } from '../src/settings';

const root = path.resolve(__dirname, '..', '..');
const bundle = path.join(root, 'dist', 'extension.js');
const manifest = JSON.parse(fs.readFileSync(path.join(root, 'package.json'), 'utf8'));

interface Recorded {
  handlers: Map<string, (...args: unknown[]) => Promise<void>>;
  commands: string[];
  trees: string[];
  settings: string[];
  statusItems: string[];
  errors: string[];
}

/** Any property is another stand-in, any call or `new` returns one: enough for the language client. */
function standIn(name: string): any {
  const target = function () {} as any;
  return new Proxy(target, {
    get(t, p) {
      if (p === 'then') return undefined;
      if (p === Symbol.toPrimitive) return () => name;
      if (!(p in t)) t[p] = standIn(`${name}.${String(p)}`);
      return t[p];
    },
    set(t, p, value) {
      Object.defineProperty(t, p, { value, writable: true, configurable: true });
      return true;
    },
    apply: () => standIn(`${name}()`),
    construct: () => standIn(`new ${name}`),
  });
}

function fakeVscode(recorded: Recorded, settings: Record<string, unknown>, folders: string[]): any {
  const vscode = standIn('vscode');
  const disposable = { dispose() {} };
  vscode.version = '1.95.0';
  vscode.env.appName = 'Visual Studio Code';
  vscode.env.language = 'en';
  vscode.commands.registerCommand = (id: string, handler: (...args: unknown[]) => Promise<void>) => {
    recorded.commands.push(id);
    recorded.handlers.set(id, handler);
    return disposable;
  };
  vscode.window.registerTreeDataProvider = (id: string) => (recorded.trees.push(id), disposable);
  vscode.window.createStatusBarItem = (id: string) => (recorded.statusItems.push(id), standIn('statusItem'));
  vscode.window.showErrorMessage = async (message: string) => void recorded.errors.push(message);
  vscode.workspace.getConfiguration = (section: string) => ({
    get: (key: string) => (recorded.settings.push(`${section}.${key}`), settings[key]),
  });
  vscode.workspace.workspaceFolders = folders.map((fsPath, index) => ({
    uri: { fsPath, scheme: 'file', toString: () => pathToFileURL(fsPath).toString() },
    name: path.basename(fsPath),
    index,
  }));
  vscode.window.activeTextEditor = undefined;
  vscode.workspace.rootPath = folders[0];
  vscode.Uri.file = (fsPath: string) => ({ fsPath, scheme: 'file', toString: () => pathToFileURL(fsPath).toString() });
  // esbuild's namespace import copies the module's own keys: give it the ones extension.ts uses.
  const source = fs.readFileSync(path.join(root, 'src', 'extension.ts'), 'utf8');
  const namespace: Record<string, unknown> = {};
  for (const [, key] of source.matchAll(/vscode\.([A-Za-z]+)/g)) namespace[key] = vscode[key];
  return new Proxy(namespace, { get: (t, p) => (p in t ? t[p as string] : vscode[p]) });
}

/** Activates the bundle, runs `during` while it is active, then deactivates it. */
async function activate(
  settings: Record<string, unknown>,
  folders: string[] = [],
  during: (recorded: Recorded) => Promise<void> = async () => undefined,
): Promise<Recorded> {
  const recorded: Recorded = { handlers: new Map(), commands: [], trees: [], settings: [], statusItems: [], errors: [] };
  const vscode = fakeVscode(recorded, settings, folders);
  const loader = Module as unknown as { _load: (request: string, ...rest: unknown[]) => unknown };
  const original = loader._load;
  loader._load = function (request: string, ...rest: unknown[]) {
    return request === 'vscode' ? vscode : original.call(this, request, ...rest);
  };
  try {
    delete require.cache[bundle];
    const extension = require(bundle);
    await extension.activate({ subscriptions: [] });
    try {
      await during(recorded);
    } finally {
      await extension.deactivate();
    }
  } finally {
    loader._load = original;
  }
  return recorded;
}

describe('activation of the bundle', () => {
  it('registers every contributed command and view and reads every setting', async () => {
    assert.ok(fs.existsSync(bundle), 'bundle first: scripts/test runs esbuild before the tests');
    const recorded = await activate({ serverPath: path.join(root, 'no-such-soba') });
    const contributed = manifest.contributes.commands.map((c: { command: string }) => c.command);
    assert.deepEqual([...recorded.commands].sort(), [...contributed].sort());
    assert.deepEqual([...recorded.trees].sort(), Object.values(manifest.contributes.views).flat().map((v: any) => v.id).sort());
    assert.deepEqual([...new Set(recorded.settings)].sort(), SETTING_KEYS.map((k) => `soba.${k}`).sort());
    assert.deepEqual(recorded.statusItems, ['soba.budget']);
  });

  it('says how to fix a daemon that cannot be started', async () => {
    const missing = path.join(root, 'no-such-soba');
    const recorded = await activate({ serverPath: missing });
    // The language client adds its own generic line; ours says what to do.
    const ours = recorded.errors.filter((e) => e.startsWith('SOBA: could not start'));
    assert.equal(ours.length, 1, JSON.stringify(recorded.errors));
    assert.match(ours[0], /ENOENT/);
    assert.ok(ours[0].startsWith(`SOBA: could not start "${missing} serve": `), ours[0]);
    assert.ok(ours[0].endsWith('Install soba or set "soba.serverPath".'), ours[0]);
  });

  it('sends palette commands to the real daemon through the language client', { timeout: 60_000 }, async () => {
    const bin = process.env.SOBA_BIN ?? path.resolve(root, '..', '..', 'target', 'debug', 'soba');
    assert.ok(fs.existsSync(bin), `no daemon binary at ${bin}: run cargo build --bin soba or set SOBA_BIN`);
    const tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'soba-activation-'));
    const workspace = path.join(tmp, 'workspace');
    fs.mkdirSync(workspace);
    const saved = { ...process.env };
    // The language client starts the daemon with this process's environment.
    Object.assign(process.env, {
      SOBA_DATA_DIR: path.join(tmp, 'data'),
      SOBA_RUNTIME_DIR: path.join(tmp, 'runtime'),
      SOBA_CONFIG: path.join(tmp, 'no-user-config.json'),
    });
    try {
      await activate({ serverPath: bin, serverArgs: ['--standalone'] }, [workspace], async (recorded) => {
        assert.deepEqual(recorded.errors, [], 'the daemon started');
        // No agent opened a session in this workspace: the daemon says so, and the command shows it.
        await recorded.handlers.get('soba.showBudget')!();
        assert.equal(recorded.errors.length, 1, JSON.stringify(recorded.errors));
        assert.match(recorded.errors[0], /^SOBA: .*no active session/);
      });
    } finally {
      process.env = saved;
      fs.rmSync(tmp, { recursive: true, force: true });
    }
  });
});
