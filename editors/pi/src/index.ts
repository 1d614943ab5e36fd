// pi extension: SOBA does pi's compactions. SOBA's capsule becomes pi's compaction summary and
// SOBA's cut its firstKeptEntryId; unless SOBA's config names a summarizer, pi's own model writes
// the capsule from SOBA's prompt and facts. When SOBA cannot answer, pi compacts on its own and
// says why: in pi's UI (interactive, RPC), else on stderr (`pi -p`, `--mode json`).
import { isContextOverflow, type AssistantMessage } from '@mariozechner/pi-ai';
import type { ExtensionAPI, ExtensionContext, ExtensionUIContext } from '@mariozechner/pi-coding-agent';
import { SobaConnection, SobaUnavailable } from './client.js';
import { compactWithSoba, piReason, SobaDeclined, SyncMemory, triggerOf } from './compact.js';
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

/**
 * What a compaction needs from pi. pi's extension context throws on every read once pi has
 * disposed its session: at the end of a `pi -p` run (while the compaction pi started after the
 * last turn is still running), and on /new, /resume, /fork and /reload. So each compaction reads
 * these once, and the last reading taken while the context was live stands in for a stale one.
 */
interface PiView {
  cwd: string;
  model: ExtensionContext['model'];
  modelRegistry: ExtensionContext['modelRegistry'];
  /** pi's UI; absent in print mode (`pi -p`, `--mode json`), where notices go to stderr. */
  ui: ExtensionUIContext | undefined;
}

/** pi's context read once, or undefined when pi has already disposed the session. */
function readView(ctx: ExtensionContext): PiView | undefined {
  try {
    return { cwd: ctx.cwd, model: ctx.model, modelRegistry: ctx.modelRegistry, ui: ctx.hasUI ? ctx.ui : undefined };
  } catch {
    return undefined;
  }
}

interface Notice {
  ui: ExtensionUIContext;
  message: string;
  level: 'info' | 'warning';
}

export default function soba(pi: ExtensionAPI): void {
  const settings = settingsFrom(process.env);
  let connection: SobaConnection | undefined;
  const sessions = new Set<string>();
  const memory = new SyncMemory();
  /** The compaction waiting for SOBA: the daemon's summarization prompts run on its model. */
  let compacting: Compacting | undefined;
  /** pi's context as last read while it was live. */
  let lastView: PiView | undefined;
  /** Compactions under way; the connection closes only once none is left. */
  let running = 0;
  /** pi has shut this session down (the end of a run, a session replacement, a reload). */
  let ended = false;
  /**
   * The notice of the compaction under way, shown once pi has recorded it: pi's interactive UI
   * redraws its chat from the session then, which would erase a notice shown before.
   */
  let pending: Notice | undefined;

  /** A notice the user sees in every mode: pi's UI when it has one, else stderr. */
  function notify(ui: ExtensionUIContext | undefined, message: string, level: Notice['level']): void {
    if (ui) pending = { ui, message, level };
    else process.stderr.write(`${message}\n`);
  }

  function showPending(): void {
    const notice = pending;
    pending = undefined;
    notice?.ui.notify(notice.message, notice.level);
  }

  function remember(ctx: ExtensionContext): void {
    lastView = readView(ctx) ?? lastView;
  }

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

  /** Close this run's SOBA sessions and end the daemon connection (and its `soba serve`). */
  async function release(): Promise<void> {
    const c = connection;
    connection = undefined;
    const open = [...sessions];
    sessions.clear();
    if (!c?.alive) return;
    for (const sessionId of open) {
      await c.request('soba/session/close', { sessionId }).catch(() => {});
    }
    await c.close();
  }

  function fallBack(ui: ExtensionUIContext | undefined, why: string): undefined {
    notify(ui, `SOBA did not compact (${why}); pi compacts on its own.`, 'warning');
    return undefined;
  }

  // pi sets the new model before it tells extensions, so the context read here holds it.
  pi.on('session_start', (_event, ctx) => remember(ctx));
  pi.on('model_select', (_event, ctx) => remember(ctx));

  pi.on('session_before_compact', async (event, ctx) => {
    const view = readView(ctx) ?? lastView;
    if (!view) return fallBack(undefined, 'pi ended the session before the extension saw it start');
    lastView = view;
    running++;
    let c: SobaConnection | undefined;
    let sessionId: string | undefined;
    const cancel = () => {
      if (sessionId) c?.fireAndForget('soba/cancel', { sessionId });
    };
    event.signal.addEventListener('abort', cancel, { once: true });
    try {
      try {
        c = await daemon(view.cwd);
      } catch (e) {
        return fallBack(view.ui, (e as Error).message);
      }
      compacting = { model: view.model, modelRegistry: view.modelRegistry, signal: event.signal };
      const model = view.model;
      const branch = event.branchEntries as unknown as PiEntry[];
      const reason = piReason(
        {
          customInstructions: event.customInstructions,
          branch,
          tokensBefore: event.preparation.tokensBefore,
          settings: event.preparation.settings,
          model,
        },
        (message, window) => isContextOverflow(message as unknown as AssistantMessage, window),
      );
      const result = await compactWithSoba(
        c,
        {
          workspace: view.cwd,
          branch,
          instructions: event.customInstructions,
          tokensBefore: event.preparation.tokensBefore,
          trigger: triggerOf(reason),
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
        notify(view.ui, `SOBA compacted ${tokensBefore} → ${tokensAfter} tokens (${checkpointId}, ${quality}).`, 'info');
      }
      return { compaction: result };
    } catch (e) {
      if (event.signal.aborted) return undefined;
      if (e instanceof SobaUnavailable || e instanceof SobaDeclined) return fallBack(view.ui, e.message);
      const err = e as { code?: number; message?: string };
      return fallBack(view.ui, `the SOBA daemon answered ${err.code ?? 'an error'}: ${err.message ?? String(e)}`);
    } finally {
      compacting = undefined;
      event.signal.removeEventListener('abort', cancel);
      running--;
      // The session ended while this compaction ran (the last turn of a `pi -p` run): pi still
      // records the compaction, and the daemon connection goes once it is no longer needed.
      if (ended && running === 0) void release();
    }
  });

  // pi tells its UI that the compaction ended right after this event: the notice follows that.
  pi.on('session_compact', () => {
    setTimeout(showPending, 0);
  });
  // A compaction pi did not record (its own summary failed or was cancelled) leaves the notice
  // for the next turn, or the end of the session.
  pi.on('agent_start', showPending);

  pi.on('session_shutdown', async () => {
    showPending();
    ended = true;
    // A compaction under way finishes first and releases the connection itself.
    if (running === 0) await release();
  });
}
