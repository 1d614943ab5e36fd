// pi session entries → SOBA session-log entries, and SOBA's answer → pi's compaction.
// Pure functions: no I/O, unit-tested in test/entries.test.ts.
import type { ModelMessage } from '../../../sdk/ts/src/protocol.js';

/** The parts of a pi session entry this extension reads (pi's `SessionEntry`). */
export interface PiEntry {
  type: string;
  id: string;
  parentId?: string | null;
  timestamp?: string;
  message?: PiMessage;
  summary?: string;
  content?: string | PiBlock[];
  details?: unknown;
}

export interface PiMessage {
  role: string;
  content?: string | PiBlock[];
  model?: string;
  provider?: string;
  stopReason?: string;
  errorMessage?: string;
  usage?: { input?: number; output?: number; cacheRead?: number; cacheWrite?: number };
  toolCallId?: string;
  toolName?: string;
  isError?: boolean;
  command?: string;
  output?: string;
  exitCode?: number | null;
  cancelled?: boolean;
  truncated?: boolean;
  fullOutputPath?: string;
  excludeFromContext?: boolean;
}

export interface PiBlock {
  type: string;
  text?: string;
  thinking?: string;
  id?: string;
  name?: string;
  arguments?: unknown;
  data?: string;
  mimeType?: string;
}

/** A SOBA entry as `soba/session/append` takes it (docs/protocol.md, "Entry"). */
export type SobaEntry = Record<string, unknown> & { id: string; type: string };

/** What a SOBA compaction recorded in pi's compaction entry, to continue from it next time. */
export interface SobaMark {
  sessionId: string;
  checkpointId: string;
}


const BRANCH_SUMMARY_PREFIX =
  'The following is a summary of a branch that this conversation came back from:\n\n<summary>\n';
const BRANCH_SUMMARY_SUFFIX = '</summary>';

function blocks(content: string | PiBlock[] | undefined): Record<string, unknown>[] {
  if (content === undefined) return [];
  if (typeof content === 'string') return [{ type: 'text', text: content }];
  return content.map((b) => {
    switch (b.type) {
      case 'text':
        return { type: 'text', text: b.text ?? '' };
      case 'thinking':
        return { type: 'thinking', thinking: b.thinking ?? '' };
      case 'toolCall':
        return { type: 'tool_call', id: b.id ?? '', name: b.name ?? '', input: b.arguments ?? null };
      case 'image':
        return { type: 'image', mediaType: b.mimeType, data: b.data };
      default:
        return { type: 'text', text: JSON.stringify(b) };
    }
  });
}

/** The text pi sends the model for a command the user ran with `!` (pi's `bashExecutionToText`). */
export function bashExecutionText(m: PiMessage): string {
  let text = `Ran \`${m.command ?? ''}\`\n`;
  text += m.output ? `\`\`\`\n${m.output}\n\`\`\`` : '(no output)';
  if (m.cancelled) text += '\n\n(command cancelled)';
  else if (m.exitCode !== null && m.exitCode !== undefined && m.exitCode !== 0) {
    text += `\n\nCommand exited with code ${m.exitCode}`;
  }
  if (m.truncated && m.fullOutputPath) {
    text += `\n\n[Output truncated. Full output: ${m.fullOutputPath}]`;
  }
  return text;
}

function nonzeroUsage(u: PiMessage['usage']): Record<string, number> | undefined {
  if (!u) return undefined;
  const usage = {
    input: u.input ?? 0,
    cacheRead: u.cacheRead ?? 0,
    cacheWrite: u.cacheWrite ?? 0,
    output: u.output ?? 0,
  };
  // An aborted request reports all zeros: that is no measurement of the context.
  return Object.values(usage).some((n) => n > 0) ? usage : undefined;
}

/**
 * The SOBA entry for a pi entry, under the pi entry's own id (so SOBA's cut names a pi entry),
 * or undefined when the entry is nothing the model sees (settings, labels, pi's compactions).
 */
export function toSobaEntry(e: PiEntry): SobaEntry | undefined {
  const base = { id: e.id, ...(e.timestamp ? { ts: e.timestamp } : {}) };
  if (e.type === 'message' && e.message) {
    const m = e.message;
    switch (m.role) {
      case 'user':
        return { ...base, type: 'message', role: 'user', content: blocks(m.content) };
      case 'assistant': {
        const usage = nonzeroUsage(m.usage);
        return {
          ...base,
          type: 'message',
          role: 'assistant',
          content: blocks(m.content),
          ...(usage ? { usage } : {}),
          ...(m.model ? { model: m.model } : {}),
        };
      }
      case 'toolResult':
        return {
          ...base,
          type: 'tool_result',
          callId: m.toolCallId ?? '',
          ...(m.toolName ? { toolName: m.toolName } : {}),
          content: blocks(m.content),
          isError: m.isError === true,
        };
      case 'bashExecution':
        if (m.excludeFromContext) return undefined;
        return { ...base, type: 'message', role: 'user', synthetic: true, content: [{ type: 'text', text: bashExecutionText(m) }] };
      default:
        return undefined;
    }
  }
  if (e.type === 'custom_message') {
    return { ...base, type: 'message', role: 'user', synthetic: true, content: blocks(e.content) };
  }
  if (e.type === 'branch_summary' && e.summary) {
    const text = BRANCH_SUMMARY_PREFIX + e.summary + BRANCH_SUMMARY_SUFFIX;
    return { ...base, type: 'message', role: 'user', synthetic: true, content: [{ type: 'text', text }] };
  }
  return undefined;
}

/** The SOBA mark a pi compaction entry carries when SOBA wrote it. */
export function sobaMark(e: PiEntry): SobaMark | undefined {
  if (e.type !== 'compaction' || typeof e.details !== 'object' || e.details === null) return undefined;
  const soba = (e.details as { soba?: Partial<SobaMark> }).soba;
  if (typeof soba?.sessionId === 'string' && typeof soba.checkpointId === 'string') {
    return { sessionId: soba.sessionId, checkpointId: soba.checkpointId };
  }
  return undefined;
}

export interface SyncPlan {
  /** The latest SOBA compaction on the branch: its session already holds what came before. */
  resume?: SobaMark;
  /** Entries to append after `resume.checkpointId` (every entry of the branch without one). */
  entries: SobaEntry[];
}

/**
 * What to send SOBA for a pi branch (root → leaf). Everything before the branch's latest SOBA
 * compaction is already in that SOBA session, so only what followed it is appended, after the
 * capsule it recorded; on a branch without one, the whole branch goes into a new session.
 */
export function planSync(branch: PiEntry[]): SyncPlan {
  let from = 0;
  let resume: SobaMark | undefined;
  for (let i = branch.length - 1; i >= 0; i--) {
    const mark = sobaMark(branch[i]);
    if (mark) {
      resume = mark;
      from = i + 1;
      break;
    }
  }
  const entries = branch.slice(from).map(toSobaEntry).filter((e): e is SobaEntry => e !== undefined);
  return { resume, entries };
}

/** The whole branch for a new SOBA session (when the session a mark names cannot be used). */
export function fullSync(branch: PiEntry[]): SobaEntry[] {
  return branch.map(toSobaEntry).filter((e): e is SobaEntry => e !== undefined);
}

/** An entry pi accepts as `firstKeptEntryId`: never a tool result, which must follow its call. */
function isPiCutPoint(e: PiEntry): boolean {
  if (e.type === 'custom_message' || e.type === 'branch_summary') return true;
  return e.type === 'message' && e.message !== undefined && e.message.role !== 'toolResult';
}

export interface PiCompaction {
  summary: string;
  firstKeptEntryId: string;
}

export class CutError extends Error {}

/**
 * pi's compaction from SOBA's model input after a compaction: the capsule (the first message,
 * the one with no entry id) becomes the summary, and the first retained entry becomes
 * `firstKeptEntryId`. A retained tool result moves the cut back to the entry pi can start from
 * before it, so the call stays with its result.
 */
export function compactionFromInput(messages: ModelMessage[], branch: PiEntry[]): PiCompaction {
  const capsule = messages[0];
  if (!capsule || capsule.entryId != null) {
    throw new CutError('the model input does not start with a capsule');
  }
  const summary = capsule.content
    .flatMap((b) => (b.type === 'text' && typeof b.text === 'string' ? [b.text] : []))
    .join('\n');
  if (summary.trim() === '') throw new CutError('the capsule has no text');
  const index = new Map(branch.map((e, i) => [e.id, i]));
  for (const m of messages.slice(1)) {
    const at = m.entryId == null ? undefined : index.get(m.entryId);
    if (at === undefined) continue;
    for (let i = at; i >= 0; i--) {
      if (isPiCutPoint(branch[i])) return { summary, firstKeptEntryId: branch[i].id };
    }
  }
  throw new CutError('SOBA kept no entry of this branch for pi to start from');
}
