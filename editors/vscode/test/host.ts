// The extension's bundle (dist/extension.js) loaded the way VS Code would, with a recording
// stand-in for the `vscode` module: what the status bar, views, messages and progress show.

import assert from 'node:assert/strict';
import * as fs from 'node:fs';
import Module from 'node:module';
import * as path from 'node:path';
import { pathToFileURL } from 'node:url';
import { EXTENSION_ROOT } from './paths';

export const root = EXTENSION_ROOT;
export const bundle = path.join(root, 'dist', 'extension.js');
export const manifest = JSON.parse(fs.readFileSync(path.join(root, 'package.json'), 'utf8'));

export interface Recorded {
  handlers: Map<string, (...args: unknown[]) => Promise<void>>;
  /** Tree data providers by view id. */
  views: Map<string, { getChildren(): Array<{ label: string; description?: string }> }>;
  /** Fires `onDidChangeConfiguration` for `section`. */
  changeConfiguration(section: string): void;
  commands: string[];
  trees: string[];
  settings: string[];
  statusItems: string[];
  errors: string[];
  /** Lines written to the extension's output channels, as `<channel>: <line>`. */
  output: string[];
  infos: string[];
  /** The status bar item as the extension last left it. */
  status: { text: string; tooltip: string; background: string | undefined; visible: boolean };
  progress: Array<{
    title: string;
    cancellable: boolean;
    reports: Array<{ increment?: number; message?: string }>;
    done: boolean;
    /** The user's Cancel on the notification. */
    cancel(): void;
  }>;
  /** Context keys as the extension last set them (`setContext`). */
  contexts: Map<string, unknown>;
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
  vscode.window.registerTreeDataProvider = (id: string, provider: any) => {
    recorded.trees.push(id);
    recorded.views.set(id, provider);
    return disposable;
  };
  vscode.commands.executeCommand = async (id: string, ...args: unknown[]) => {
    if (id === 'setContext') recorded.contexts.set(args[0] as string, args[1]);
  };
  const configurationListeners: Array<(e: { affectsConfiguration(s: string): boolean }) => void> = [];
  recorded.changeConfiguration = (section) => {
    for (const listener of configurationListeners) listener({ affectsConfiguration: (s) => s === section });
  };
  vscode.workspace.onDidChangeConfiguration = (listener: (e: { affectsConfiguration(s: string): boolean }) => void) => {
    configurationListeners.push(listener);
    return disposable;
  };
  vscode.window.createStatusBarItem = (id: string) => {
    recorded.statusItems.push(id);
    const status = recorded.status;
    return {
      set text(value: string) {
        status.text = value;
      },
      set tooltip(value: string) {
        status.tooltip = value;
      },
      set backgroundColor(value: { id: string } | undefined) {
        status.background = value?.id;
      },
      show: () => void (status.visible = true),
      hide: () => void (status.visible = false),
      dispose: () => undefined,
    };
  };
  vscode.window.createOutputChannel = (name: string) => {
    const channel = standIn(`output ${name}`);
    channel.appendLine = (line: string) => void recorded.output.push(`${name}: ${line}`);
    return channel;
  };
  vscode.ThemeColor = class {
    constructor(readonly id: string) {}
  };
  vscode.window.showInformationMessage = async (message: string) => void recorded.infos.push(message);
  vscode.window.showWarningMessage = async (message: string) => void recorded.infos.push(`warning: ${message}`);
  vscode.window.showInputBox = async () => '';
  // Notification progress is the extension's; the language client shows `$/progress` in the window.
  vscode.window.withProgress = async (
    options: { title: string; location: unknown; cancellable?: boolean },
    task: (p: unknown, token: unknown) => Promise<void>,
  ) => {
    const listeners: Array<() => void> = [];
    const token = {
      isCancellationRequested: false,
      onCancellationRequested: (listener: () => void) => (listeners.push(listener), disposable),
    };
    const entry = {
      title: options.title,
      cancellable: options.cancellable === true,
      reports: [] as Array<{ increment?: number; message?: string }>,
      done: false,
      cancel: () => {
        assert.ok(options.cancellable, `the progress "${options.title}" offers no Cancel`);
        token.isCancellationRequested = true;
        for (const listener of listeners) listener();
      },
    };
    if (options.location === vscode.ProgressLocation.Notification) recorded.progress.push(entry);
    await task({ report: (r: { increment?: number; message?: string }) => void entry.reports.push(r) }, token);
    entry.done = true;
  };
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
export async function activate(
  settings: Record<string, unknown>,  // read live: a test may change it and fire changeConfiguration
  folders: string[] = [],
  during: (recorded: Recorded) => Promise<void> = async () => undefined,
): Promise<Recorded> {
  const recorded: Recorded = {
    handlers: new Map(),
    views: new Map(),
    changeConfiguration: () => undefined,
    commands: [],
    trees: [],
    settings: [],
    statusItems: [],
    errors: [],
    output: [],
    infos: [],
    status: { text: '', tooltip: '', background: undefined, visible: false },
    progress: [],
    contexts: new Map(),
  };
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

export async function waitFor(done: () => boolean, ms = 10_000): Promise<void> {
  const deadline = Date.now() + ms;
  while (!done()) {
    assert.ok(Date.now() < deadline, 'timed out');
    await new Promise((r) => setTimeout(r, 25));
  }
}
