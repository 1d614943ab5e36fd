// A private daemon per test file: its own data and runtime folders, no user config.
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';

import { SobaClient, type SpawnOptions } from '../src';

export const BIN = process.env.SOBA_BIN || path.resolve(__dirname, '../../../../target/debug/soba');

export function sandbox(name: string) {
  const base = fs.mkdtempSync(path.join(os.tmpdir(), `soba-sdk-ts-${name}-`));
  const env = {
    ...process.env,
    SOBA_DATA_DIR: path.join(base, 'data'),
    SOBA_RUNTIME_DIR: path.join(base, 'run'),
    SOBA_CONFIG: path.join(base, 'no-user-config.json'),
    SOBA_DAEMON_IDLE_SECS: '2',
  };
  const clients: SobaClient[] = [];
  return {
    base,
    env,
    /** A workspace whose window is small enough (hard limit 9808, with the spec's 8192-token reserve) for a dozen messages to force a compaction. */
    workspace(wsName: string): string {
      const ws = path.join(base, wsName);
      fs.mkdirSync(path.join(ws, '.soba'), { recursive: true });
      fs.writeFileSync(
        path.join(ws, '.soba', 'config.json'),
        JSON.stringify({
          model: { name: 'gpt-4o', contextWindow: 20000, maxOutputTokens: 2000 },
          // The spec's reserve (8192), not the one SOBA scales to a window below 64k by default.
          compaction: { keepRecentTokens: 1000, minTokensForAutoCompact: 3000, minReclaimableTokens: 500, safetyReserveTokens: 8192 },
        }),
      );
      return fs.realpathSync(ws);
    },
    async connect(ws: string, options: SpawnOptions = {}): Promise<SobaClient> {
      const c = await SobaClient.spawn({ bin: BIN, env, workspaceFolders: [ws], ...options });
      clients.push(c);
      return c;
    },
    async cleanup() {
      for (const c of clients) await c.close().catch(() => undefined);
      fs.rmSync(base, { recursive: true, force: true });
    },
  };
}

/** About 3000 tokens of distinct text. */
export const words = (i: number) => Array.from({ length: 1000 }, (_, w) => `w${(i * 7919 + w) % 9973}`).join(' ');

export const until = async (pred: () => boolean, ms = 5000) => {
  const end = Date.now() + ms;
  while (!pred()) {
    if (Date.now() > end) throw new Error('timed out waiting');
    await new Promise((r) => setTimeout(r, 20));
  }
};
