// One pi compaction done by SOBA: bring the SOBA session up to pi's branch, compact it, and
// read the capsule and the retained tail back as pi's summary and firstKeptEntryId.
import {
  compactionFromInput,
  fullSync,
  planSync,
  type PiEntry,
  type PiMessage,
  type SobaEntry,
  type SobaMark,
} from './entries.js';
import type { AppendedEntry, MethodName, Methods } from '../../../sdk/ts/src/protocol.js';

/** The daemon requests this needs (SobaConnection in production). */
export interface Daemon {
  request<M extends MethodName>(method: M, params: Methods[M]['params']): Promise<Methods[M]['result']>;
}

export interface CompactionInput {
  workspace: string;
  branch: PiEntry[];
  instructions?: string;
  tokensBefore: number;
  model?: { name?: string; contextWindow?: number; maxOutputTokens?: number };
  /** Why pi compacts, as SOBA records it (default `user`). */
  trigger?: SobaTrigger;
}

/** The triggers SOBA records for a compaction its client starts. */
export type SobaTrigger = NonNullable<Methods['soba/compact']['params']['trigger']>;

/** pi's reasons for compacting: `/compact`, its context past its threshold, a context overflow. */
export type PiReason = 'manual' | 'threshold' | 'overflow';

const TRIGGER_OF_PI_REASON: Record<PiReason, SobaTrigger> = {
  manual: 'user',
  threshold: 'auto_threshold',
  overflow: 'context_overflow',
};

export function triggerOf(reason: PiReason): SobaTrigger {
  return TRIGGER_OF_PI_REASON[reason];
}

/** What pi's compaction event holds that tells its reason. */
export interface PiCompactionEvent {
  customInstructions?: string;
  branch: PiEntry[];
  tokensBefore: number;
  settings: { enabled: boolean; reserveTokens: number };
  /** The model pi runs now: its overflow error counts only if it answered it (pi's own rule). */
  model?: { provider?: string; id?: string; contextWindow?: number };
}

/**
 * pi's reason for a compaction. pi does not pass it to extensions, so it is read as pi decides
 * it: instructions come only with `/compact`, and pi compacts on its own only when its automatic
 * compaction is on; then after the model's context-overflow error (`isOverflow`, pi's own test,
 * on the latest assistant message since the last compaction), or with the context past
 * `contextWindow - reserveTokens`. Anything else is a `/compact`.
 */
export function piReason(
  event: PiCompactionEvent,
  isOverflow: (message: PiMessage, contextWindow?: number) => boolean,
): PiReason {
  if (event.customInstructions !== undefined || !event.settings.enabled) return 'manual';
  const window = event.model?.contextWindow ?? 0;
  let last: PiMessage | undefined;
  for (let i = event.branch.length - 1; i >= 0 && !last; i--) {
    const e = event.branch[i];
    if (e.type === 'compaction') break;
    if (e.type === 'message' && e.message?.role === 'assistant') last = e.message;
  }
  const sameModel = last !== undefined && last.provider === event.model?.provider && last.model === event.model?.id;
  if (last && sameModel && isOverflow(last, window)) return 'overflow';
  if (window > 0 && event.tokensBefore > window - event.settings.reserveTokens) return 'threshold';
  return 'manual';
}

export interface SobaCompaction {
  summary: string;
  firstKeptEntryId: string;
  tokensBefore: number;
  details: { soba: SobaMark & { quality: string | null; tokensBefore?: number; tokensAfter?: number } };
}

/** SOBA answered but did not compact (nothing to reclaim, a failed capsule): pi compacts itself. */
export class SobaDeclined extends Error {}

interface RpcError {
  code?: number;
  message?: string;
}

const INVALID_PARAMS = -32602;
const UNKNOWN_SESSION = -32002;

export async function compactWithSoba(
  daemon: Daemon,
  input: CompactionInput,
  memory: SyncMemory,
  onSession?: (sessionId: string) => void,
): Promise<SobaCompaction> {
  const sessionId = await sync(daemon, input, memory, onSession);
  const result = await daemon.request('soba/compact', {
    sessionId,
    ...(input.instructions ? { instructions: input.instructions } : {}),
    ...(input.trigger && input.trigger !== 'user' ? { trigger: input.trigger } : {}),
  });
  if (result.outcome !== 'completed' || !result.checkpointId) {
    throw new SobaDeclined(`SOBA's compaction ended ${result.outcome}${result.reason ? `: ${result.reason}` : ''}`);
  }
  const { messages } = await daemon.request('soba/preflight', { sessionId });
  let pi;
  try {
    pi = compactionFromInput(messages, input.branch);
  } catch (e) {
    throw new SobaDeclined((e as Error).message);
  }
  memory.compacted(sessionId, result.checkpointId);
  return {
    ...pi,
    tokensBefore: input.tokensBefore,
    details: {
      soba: {
        sessionId,
        checkpointId: result.checkpointId,
        quality: result.quality ?? null,
        tokensBefore: result.tokensBefore,
        tokensAfter: result.tokensAfter,
      },
    },
  };
}

/**
 * What this pi process last did to each SOBA session: the capsule its last compaction wrote and
 * the pi entries appended since. While pi's branch still ends in that compaction, new entries
 * simply follow the session's leaf (the capsule, or file changes the daemon recorded after it).
 */
export class SyncMemory {
  private readonly sessions = new Map<string, { checkpointId: string; appended: Set<string> }>();

  compacted(sessionId: string, checkpointId: string): void {
    this.sessions.set(sessionId, { checkpointId, appended: new Set() });
  }

  /** The ids appended after `checkpointId`, when it is still this session's latest capsule here. */
  appendedAfter(sessionId: string, checkpointId: string): Set<string> | undefined {
    const s = this.sessions.get(sessionId);
    return s?.checkpointId === checkpointId ? s.appended : undefined;
  }

  forget(sessionId: string): void {
    this.sessions.delete(sessionId);
  }
}

/**
 * The SOBA session holding pi's branch: the one the branch's latest SOBA compaction names, with
 * what followed it appended after its capsule; else (none yet, or that session is gone or does
 * not take the entries) a new session with the whole branch.
 */
async function sync(
  daemon: Daemon,
  input: CompactionInput,
  memory: SyncMemory,
  onSession?: (sessionId: string) => void,
): Promise<string> {
  const plan = planSync(input.branch);
  if (plan.resume) {
    const resumed = await resume(daemon, input.workspace, plan.resume, plan.entries, memory);
    if (resumed) {
      onSession?.(resumed);
      return resumed;
    }
  }
  const opened = await daemon.request('soba/session/open', {
    workspace: input.workspace,
    ...(input.model ? { model: input.model } : {}),
  });
  onSession?.(opened.sessionId);
  await append(daemon, opened.sessionId, fullSync(input.branch));
  return opened.sessionId;
}

async function resume(
  daemon: Daemon,
  workspace: string,
  mark: SobaMark,
  entries: SobaEntry[],
  memory: SyncMemory,
): Promise<string | undefined> {
  const { sessionId, checkpointId } = mark;
  try {
    await daemon.request('soba/session/open', { workspace, sessionId, create: false });
    const appended = memory.appendedAfter(sessionId, checkpointId);
    if (appended) {
      const fresh = entries.filter((e) => !appended.has(e.id));
      await append(daemon, sessionId, fresh);
      for (const e of fresh) appended.add(e.id);
      return sessionId;
    }
    // Another pi process or another branch: continue right after the capsule itself.
    const { capsules } = await daemon.request('soba/capsule/list', { sessionId });
    const capsule = capsules.find((c) => c.checkpointId === checkpointId);
    if (!capsule) return undefined;
    if (entries.length > 0) {
      const [first, ...rest] = entries;
      await append(daemon, sessionId, [{ ...first, parentId: capsule.entryId }, ...rest]);
    }
    return sessionId;
  } catch (e) {
    const code = (e as RpcError).code;
    // Gone (another data folder, deleted), or it holds these entries already on another branch.
    if (code === UNKNOWN_SESSION || code === INVALID_PARAMS) {
      memory.forget(sessionId);
      return undefined;
    }
    throw e;
  }
}

async function append(daemon: Daemon, sessionId: string, entries: SobaEntry[]): Promise<void> {
  if (entries.length === 0) return;
  // entries.ts builds each entry field by field from pi's; the daemon validates them.
  await daemon.request('soba/session/append', { sessionId, entries: entries as unknown as AppendedEntry[] });
}
