// pi extension: SOBA does pi's compactions. SOBA's capsule becomes pi's compaction summary and
// SOBA's cut its firstKeptEntryId; unless SOBA's config names a summarizer, pi's own model writes
// the capsule from SOBA's prompt and facts. When SOBA cannot answer, pi compacts on its own and
// says why.
import type { ExtensionAPI, ExtensionContext } from '@mariozechner/pi-coding-agent';
import { SobaConnection, SobaUnavailable } from './client.js';
import { compactWithSoba, SobaDeclined, SyncMemory } from './compact.js';
import type { PiEntry } from './entries.js';
import { summarizeWithPi, type Compacting } from './summarize.js';

/** Settings, from the environment pi runs in. */
export interface Settings {
  bin: string;
  timeoutMs: number;
  /** Offer pi's model to write SOBA's capsules (off with SOBA_PI_LOCAL_CAPSULES=1). */
  piModel: boolean;
}

const DEFAULT_TIMEOUT_MS = 60_000;

export function settingsFrom(env: NodeJS.ProcessEnv): Settings {
  const timeout = Number(env.SOBA_PI_TIMEOUT_MS);
  return {
    bin: env.SOBA_BIN || 'soba',
    timeoutMs: Number.isFinite(timeout) && timeout > 0 ? timeout : DEFAULT_TIMEOUT_MS,
    piModel: !['1', 'true', 'yes'].includes((env.SOBA_PI_LOCAL_CAPSULES ?? '').toLowerCase()),
  };
}

export default function soba(pi: ExtensionAPI): void {
  const settings = settingsFrom(process.env);
  let connection: SobaConnection | undefined;
  const sessions = new Set<string>();
  const memory = new SyncMemory();
  /** The compaction waiting for SOBA: the daemon's summarization prompts run on its model. */
  let compacting: Compacting | undefined;

  async function daemon(cwd: string): Promise<SobaConnection> {
    if (connection?.alive) return connection;
    connection = undefined;
    const c = await SobaConnection.connect({
      bin: settings.bin,
      workspace: cwd,
      timeoutMs: settings.timeoutMs,
      ...(settings.piModel ? { summarize: (params, signal) => summarizeWithPi(compacting, params, signal) } : {}),
    });
    connection = c;
    return c;
  }

  function fallBack(ctx: ExtensionContext, why: string): undefined {
    ctx.ui.notify(`SOBA did not compact (${why}); pi compacts on its own.`, 'warning');
    return undefined;
  }

  pi.on('session_before_compact', async (event, ctx) => {
    let c: SobaConnection;
    try {
      c = await daemon(ctx.cwd);
    } catch (e) {
      return fallBack(ctx, (e as Error).message);
    }
    let sessionId: string | undefined;
    const cancel = () => {
      if (sessionId) c.fireAndForget('soba/cancel', { sessionId });
    };
    event.signal.addEventListener('abort', cancel, { once: true });
    compacting = { ctx, signal: event.signal };
    try {
      const model = ctx.model;
      const result = await compactWithSoba(
        c,
        {
          workspace: ctx.cwd,
          branch: event.branchEntries as unknown as PiEntry[],
          instructions: event.customInstructions,
          tokensBefore: event.preparation.tokensBefore,
          model: model
            ? { name: model.id, contextWindow: model.contextWindow, maxOutputTokens: model.maxTokens }
            : undefined,
        },
        memory,
        (id) => {
          sessionId = id;
          sessions.add(id);
        },
      );
      const { tokensBefore, tokensAfter, quality, checkpointId } = result.details.soba;
      if (tokensBefore !== undefined && tokensAfter !== undefined) {
        ctx.ui.notify(`SOBA compacted ${tokensBefore} → ${tokensAfter} tokens (${checkpointId}, ${quality}).`, 'info');
      }
      return { compaction: result };
    } catch (e) {
      if (event.signal.aborted) return undefined;
      if (e instanceof SobaUnavailable || e instanceof SobaDeclined) return fallBack(ctx, e.message);
      const err = e as { code?: number; message?: string };
      return fallBack(ctx, `the SOBA daemon answered ${err.code ?? 'an error'}: ${err.message ?? String(e)}`);
    } finally {
      compacting = undefined;
      event.signal.removeEventListener('abort', cancel);
    }
  });

  pi.on('session_shutdown', async () => {
    const c = connection;
    connection = undefined;
    if (!c?.alive) return;
    // The run is over: the daemon frees the sessions it held for it.
    for (const sessionId of sessions) {
      await c.request('soba/session/close', { sessionId }).catch(() => {});
    }
    sessions.clear();
    await c.close();
  });
}
