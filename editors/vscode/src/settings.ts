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
export function serverCommand(settings: Settings): { command: string; args: string[] } {
  return { command: settings.serverPath || 'soba', args: ['serve', ...settings.serverArgs] };
}
