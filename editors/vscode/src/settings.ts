// The extension's settings, read in one place. No `vscode` import: the adapter passes a getter.

export interface Settings {
  /** Executable to start; `soba` from PATH when empty. */
  serverPath: string;
  /** Extra arguments after `serve`. */
  serverArgs: string[];
  statusBarEnabled: boolean;
  flightRecordLimit: number;
  compactMirror: boolean;
}

/** Reads `soba.<key>`; returns undefined when unset. */
export type SettingGetter = (key: string) => unknown;

/** Every key under `soba.` the extension reads; package.json must contribute exactly these. */
export const SETTING_KEYS = ['serverPath', 'serverArgs', 'statusBar.enabled', 'flightRecords.limit', 'compact.mirror'] as const;

/**
 * Settings that choose which program runs. In an untrusted workspace only their user-level
 * values count: a cloned repository's `.vscode/settings.json` must not start a binary of its
 * choosing. package.json lists them under `restrictedConfigurations`.
 */
export const RESTRICTED_KEYS: readonly string[] = ['serverPath', 'serverArgs'];

export interface Trust {
  /** `vscode.workspace.isTrusted`. */
  trusted: boolean;
  /** The user-level (global) value of `soba.<key>`, ignoring workspace and folder values. */
  userValue: SettingGetter;
}

export function readSettings(getAny: SettingGetter, trust?: Trust): Settings {
  const get: SettingGetter = (key) =>
    trust && !trust.trusted && RESTRICTED_KEYS.includes(key) ? trust.userValue(key) : getAny(key);
  const str = (v: unknown, fallback: string) => (typeof v === 'string' ? v : fallback);
  const bool = (v: unknown, fallback: boolean) => (typeof v === 'boolean' ? v : fallback);
  const limit = get('flightRecords.limit');
  const args = get('serverArgs');
  return {
    serverPath: str(get('serverPath'), '').trim(),
    serverArgs: Array.isArray(args) ? args.filter((a): a is string => typeof a === 'string') : [],
    statusBarEnabled: bool(get('statusBar.enabled'), true),
    flightRecordLimit: typeof limit === 'number' && Number.isFinite(limit) && limit > 0 ? Math.floor(limit) : 50,
    compactMirror: bool(get('compact.mirror'), false),
  };
}

/** The command line that starts the daemon for this editor. */
export function serverCommand(settings: Settings, found?: string): { command: string; args: string[] } {
  return { command: settings.serverPath || found || 'soba', args: ['serve', ...settings.serverArgs] };
}

/** What the lookup may see of the machine: passed in so it stays pure and testable. */
export interface LookupHost {
  /** `PATH` as the extension host has it (often not the login shell's). */
  path: string | undefined;
  home: string | undefined;
  workspaceFolders: readonly string[];
  /** True when `file` exists and is executable. */
  isExecutable(file: string): boolean;
}

/**
 * Where `soba` is looked for when `soba.serverPath` is empty, in order: `PATH`, then the places
 * an install puts it (`cargo install`, `make install`, `pip --user`-style), then a build in one
 * of the workspace folders (the SOBA repository itself). An editor started from a desktop menu
 * rarely has the shell's `PATH`, so the install places matter.
 */
export function serverCandidates(host: Pick<LookupHost, 'path' | 'home' | 'workspaceFolders'>): string[] {
  const join = (dir: string, name: string) => `${dir.replace(/\/+$/, '')}/${name}`;
  const fromPath = (host.path ?? '')
    .split(':')
    .filter((dir) => dir.length > 0)
    .map((dir) => join(dir, 'soba'));
  const home = host.home ? [join(host.home, '.cargo/bin/soba')] : [];
  const installed = [...home, '/usr/local/bin/soba', ...(host.home ? [join(host.home, '.local/bin/soba')] : [])];
  const builds = host.workspaceFolders.flatMap((folder) => [join(folder, 'target/release/soba'), join(folder, 'target/debug/soba')]);
  return [...new Set([...fromPath, ...installed, ...builds])];
}

/** The configured path when set (trusted as is), else the first executable candidate. */
export function findServer(settings: Settings, host: LookupHost): { path: string } | { error: string } {
  if (settings.serverPath) return { path: settings.serverPath };
  const candidates = serverCandidates(host);
  const found = candidates.find((file) => host.isExecutable(file));
  if (found) return { path: found };
  const places = ['PATH', '~/.cargo/bin', '/usr/local/bin', '~/.local/bin', "the workspace's target/release and target/debug"];
  return {
    error:
      `soba was not found (looked in ${places.join(', ')}). Install it with "cargo install --path ." ` +
      `in the SOBA repository, or set "soba.serverPath" to the executable.`,
  };
}
