// One function per palette command. No `vscode` import: the commands talk to the editor through
// `EditorUi` and to the daemon through `SobaRequester`, so they are unit-tested with fakes, and
// extension.ts registers exactly the handlers this module returns.

import {
  ErrorCode,
  type BudgetReport,
  type CapsuleSummary,
  type CompactionResult,
  type Control,
  type PreviewAction,
  type SessionTarget,
  type SobaRequester,
} from './protocol';
import type { Settings } from './settings';
import { budgetSummary, completionLine, CompactionProgress, formatTokens, timeAgo } from './status';
import { flightLines } from './views';
import { capsuleDocument, contextMarkdown } from './context';

export interface PickItem<T> {
  label: string;
  description?: string;
  detail?: string;
  value: T;
}

export interface EditorUi {
  info(message: string, ...actions: string[]): Promise<string | undefined>;
  warn(message: string): void;
  error(message: string): void;
  /** Undefined when the user dismissed the box. */
  input(options: { prompt: string; placeHolder?: string; required: boolean }): Promise<string | undefined>;
  pick<T>(items: PickItem<T>[], placeHolder: string): Promise<T | undefined>;
  /** File system path, or undefined when dismissed. */
  saveFile(defaultFileName: string): Promise<string | undefined>;
  openCapsuleFile(): Promise<string | undefined>;
  /**
   * Shows a read-only Markdown document. `name` says which one: showing a name again replaces
   * its content where it is open, so a view is never open twice.
   */
  showDocument(name: SobaDocument, content: string): void;
  /** A modal question; true only when the user chose `action`. */
  confirm(message: string, detail: string, action: string): Promise<boolean>;
  showLines(lines: string[]): void;
}

export interface CommandContext {
  ui: EditorUi;
  /** Undefined while the daemon is not running. */
  client(): SobaRequester | undefined;
  /** The workspace whose active session the commands act on. */
  target(): SessionTarget;
  settings(): Settings;
  progress: CompactionProgress;
  /** Refreshes the sidebar after a command changed the session. */
  refresh(): void;
  /** The budget the status bar shows: the target's active session, when known. */
  shownBudget(): BudgetReport | undefined;
}

export const COMMAND_IDS = [
  'soba.compact',
  'soba.showBudget',
  'soba.autoCompactOn',
  'soba.autoCompactOff',
  'soba.createCapsule',
  'soba.exportCapsule',
  'soba.loadCapsule',
  'soba.showFlightRecords',
  'soba.rewind',
  'soba.showContext',
  'soba.viewCapsule',
  'soba.cancelCompaction',
] as const;
export type CommandId = (typeof COMMAND_IDS)[number];

/** Sidebar items carry the checkpoint they stand for. */
export interface CheckpointArgument {
  checkpointId?: string;
  label?: string;
}

export type CommandHandler = (arg?: unknown) => Promise<void>;

/** The read-only documents the commands show. */
export type SobaDocument = 'context' | 'capsule' | 'preview';

/**
 * A checkpoint in a picker: its title, or what made it; when, relative and in local time; its
 * id and size below. `now` is passed in so the function stays pure.
 */
export function checkpointItem(c: CapsuleSummary, now: Date): PickItem<CapsuleSummary> {
  const made =
    c.origin === 'loaded'
      ? 'Loaded capsule'
      : c.trigger === 'handoff'
        ? 'Capsule'
        : `Compaction (${c.trigger === 'user' ? '/compact' : c.trigger.replace(/_/g, ' ')})`;
  const at = new Date(c.ts);
  const when = Number.isNaN(at.getTime())
    ? c.ts
    : `${timeAgo(c.ts, now)} · ${at.toLocaleString(undefined, { dateStyle: 'medium', timeStyle: 'short' })}`;
  return {
    label: c.title || made,
    description: when,
    // The capsule's own size, as the toast and the sidebar give it.
    detail: `${c.checkpointId} · ${c.title ? `${made} · ` : ''}${c.quality} · ${formatTokens(c.tokens.capsule)} tokens`,
    value: c,
  };
}

/** The control of the shown session when the agent compacts it itself, else undefined. */
function followedControl(ctx: CommandContext): Control | undefined {
  const control = ctx.shownBudget()?.control;
  return control?.compactedBy === 'agent' ? control : undefined;
}

/** The daemon refused to change a session its agent compacts (a budget not shown yet). */
function agentCompacts(err: unknown): boolean {
  return (err as { code?: unknown } | null)?.code === ErrorCode.AgentCompacts;
}

/** What SOBA would send after the action, as a preview document; the agent is not touched. */
async function showPreview(
  ctx: CommandContext,
  client: SobaRequester,
  action: PreviewAction,
  target: SessionTarget = ctx.target(),
): Promise<void> {
  const preview = await client.request('soba/preview', { ...target, ...action });
  ctx.ui.showDocument('preview', preview.text);
}

const COMPACT_NOW = 'Compact Now';
const PREVIEW_COMPACTION = 'Preview Compaction';

function requireClient(ctx: CommandContext): SobaRequester {
  const client = ctx.client();
  if (!client) {
    throw new Error('the SOBA daemon is not running: check the "soba.serverPath" setting and the SOBA output channel');
  }
  return client;
}

/** Shows the result of a compaction unless the daemon's own completion line already did. */
export function reportCompaction(ctx: CommandContext, result: CompactionResult): void {
  if (!ctx.progress.claim(result.operationId)) return;
  const line = completionLine(result);
  if (result.outcome === 'failed') ctx.ui.error(line);
  else if (result.fallback) ctx.ui.warn(line);
  else void ctx.ui.info(line);
}

export async function compact(ctx: CommandContext): Promise<void> {
  const client = requireClient(ctx);
  const followed = followedControl(ctx);
  const instructions = await ctx.ui.input({
    prompt: followed
      ? `Preview what SOBA would send after compacting: ${followed.note}`
      : 'Compact the context of the active session',
    placeHolder: 'Optional instructions, e.g. "keep the failing test output"',
    required: false,
  });
  if (instructions === undefined) return;
  const trimmed = instructions.trim();
  const preview = { action: 'compact', ...(trimmed ? { instructions: trimmed } : {}) } as const;
  if (followed) {
    await showPreview(ctx, client, preview);
    return;
  }
  let result: CompactionResult;
  try {
    result = await client.request('soba/compact', {
      ...ctx.target(),
      ...(trimmed ? { instructions: trimmed } : {}),
      ...(ctx.settings().compactMirror ? { mirror: true } : {}),
    });
  } catch (err) {
    if (!agentCompacts(err)) throw err;
    await showPreview(ctx, client, preview);
    return;
  }
  reportCompaction(ctx, result);
  ctx.refresh();
}

/**
 * Stops a compaction: the one the notifications show running (the agent's own, or one asked for
 * elsewhere), else the active session's, running or queued. The daemon says whether there was
 * one; its result (outcome `cancelled`) arrives as the compaction's end.
 */
export async function cancelCompaction(ctx: CommandContext): Promise<void> {
  const client = requireClient(ctx);
  const sessionId =
    ctx.progress.runningSession() ?? ctx.shownBudget()?.sessionId ?? (await client.request('soba/budget', ctx.target())).sessionId;
  const { cancelled } = await client.request('soba/cancel', { sessionId });
  if (!cancelled) void ctx.ui.info(`No compaction is running in session ${sessionId}: there is nothing to cancel.`);
  ctx.refresh();
}

export async function showBudget(ctx: CommandContext): Promise<void> {
  const report = await requireClient(ctx).request('soba/budget', ctx.target());
  const followed = report.control?.compactedBy === 'agent';
  const summary = followed && report.control ? `${budgetSummary(report)}. ${report.control.note}` : budgetSummary(report);
  const action = followed ? PREVIEW_COMPACTION : COMPACT_NOW;
  const choice = await ctx.ui.info(summary, action);
  if (choice === action) await compact(ctx);
}

async function setAutoCompact(ctx: CommandContext, enabled: boolean): Promise<void> {
  const { autoCompact } = await requireClient(ctx).request('soba/autoCompact', { ...ctx.target(), enabled });
  void ctx.ui.info(`Auto-compact is ${autoCompact ? 'on' : 'off'} for the active session.`);
  ctx.refresh();
}

export const autoCompactOn = (ctx: CommandContext) => setAutoCompact(ctx, true);
export const autoCompactOff = (ctx: CommandContext) => setAutoCompact(ctx, false);

export async function createCapsule(ctx: CommandContext): Promise<void> {
  const client = requireClient(ctx);
  const title = await ctx.ui.input({ prompt: 'Capsule title', placeHolder: 'e.g. Auth refactor hand-off', required: true });
  if (title === undefined || title.trim() === '') return;
  const created = await client.request('soba/capsule/create', { ...ctx.target(), title: title.trim() });
  void ctx.ui.info(
    `Capsule "${created.title}" created: ${created.checkpointId} (${formatTokens(created.tokens)} tokens). ` +
      'It compacts nothing: the context stays as it was; export it to hand it off.',
  );
  ctx.refresh();
}

/** `Auth refactor hand-off` → `auth-refactor-hand-off.capsule.md`. */
export function capsuleFileName(capsule: Pick<CapsuleSummary, 'title' | 'checkpointId'>): string {
  const slug = (capsule.title ?? '')
    .toLowerCase()
    .replace(/[^a-z0-9]+/g, '-')
    .replace(/^-+|-+$/g, '')
    .slice(0, 60);
  return `${slug || capsule.checkpointId}.capsule.md`;
}

export async function exportCapsule(ctx: CommandContext, arg?: unknown): Promise<void> {
  const client = requireClient(ctx);
  const fromView = arg as CheckpointArgument | undefined;
  let chosen: Pick<CapsuleSummary, 'title' | 'checkpointId'> | undefined;
  if (fromView?.checkpointId) {
    chosen = { checkpointId: fromView.checkpointId, title: fromView.label ?? '' };
  } else {
    const { capsules } = await client.request('soba/capsule/list', ctx.target());
    if (capsules.length === 0) {
      void ctx.ui.info('The active session has no checkpoints yet: compact it or create a capsule first.');
      return;
    }
    const now = new Date();
    chosen = await ctx.ui.pick(
      [...capsules].reverse().map((c) => checkpointItem(c, now)),
      'Checkpoint to export as a Portable Capsule',
    );
  }
  if (!chosen) return;
  const path = await ctx.ui.saveFile(capsuleFileName(chosen));
  if (!path) return;
  const exported = await client.request('soba/capsule/export', { ...ctx.target(), checkpointId: chosen.checkpointId, path });
  void ctx.ui.info(`Capsule ${chosen.checkpointId} exported to ${exported.path}.`);
}

/** The live context a command would replace, or undefined when there is none to lose. */
async function liveContext(client: SobaRequester, ctx: CommandContext): Promise<BudgetReport | undefined> {
  try {
    const report = await client.request('soba/budget', ctx.target());
    return report.effectiveTokens > 0 ? report : undefined;
  } catch {
    // No session yet: loading starts one, nothing is replaced.
    return undefined;
  }
}

export async function loadCapsule(ctx: CommandContext): Promise<void> {
  const client = requireClient(ctx);
  const path = await ctx.ui.openCapsuleFile();
  if (!path) return;
  if (followedControl(ctx)) {
    await showPreview(ctx, client, { action: 'capsuleLoad', path });
    return;
  }
  const live = await liveContext(client, ctx);
  if (live) {
    const ok = await ctx.ui.confirm(
      `Replace the live context (${formatTokens(live.effectiveTokens)} tokens) with this capsule?`,
      `The model will see the capsule instead of session ${live.sessionId}'s current history. ` +
        'Nothing is deleted: SOBA: Rewind to Checkpoint… goes back to any earlier checkpoint.',
      'Load Capsule',
    );
    if (!ok) return;
  }
  let loaded: { checkpointId: string; sessionId: string };
  try {
    loaded = await client.request('soba/capsule/load', { ...ctx.target(), path });
  } catch (err) {
    if (!agentCompacts(err)) throw err;
    await showPreview(ctx, client, { action: 'capsuleLoad', path });
    return;
  }
  void ctx.ui.info(`Capsule loaded into session ${loaded.sessionId} as ${loaded.checkpointId}.`);
  ctx.refresh();
}

/**
 * Rewind / restore: pick a checkpoint of the active session and move its leaf back there. The
 * log keeps everything after it (a branch), so a rewind is itself undoable from the same list.
 */
export async function rewind(ctx: CommandContext, arg?: unknown): Promise<void> {
  const client = requireClient(ctx);
  const report = await client.request('soba/budget', ctx.target());
  const { capsules } = await client.request('soba/capsule/list', { sessionId: report.sessionId });
  const fromView = arg as CheckpointArgument | undefined;
  let chosen = fromView?.checkpointId ? capsules.find((c) => c.checkpointId === fromView.checkpointId) : undefined;
  if (!chosen) {
    if (capsules.length === 0) {
      void ctx.ui.info('The active session has no checkpoints to rewind to: compact it or create a capsule first.');
      return;
    }
    const now = new Date();
    chosen = await ctx.ui.pick(
      [...capsules].reverse().map((c) => checkpointItem(c, now)),
      `Checkpoint to rewind session ${report.sessionId} to (now ${formatTokens(report.effectiveTokens)} tokens)`,
    );
  }
  if (!chosen) return;
  if (report.control?.compactedBy === 'agent') {
    await showPreview(ctx, client, { action: 'rewind', entryId: chosen.entryId }, { sessionId: report.sessionId });
    return;
  }
  const ok = await ctx.ui.confirm(
    `Rewind the active session to ${chosen.title || chosen.checkpointId}?`,
    `The live context (${formatTokens(report.effectiveTokens)} tokens) becomes the checkpoint's ` +
      `(${formatTokens(chosen.tokens.after)} tokens). The later entries stay in the log as a branch.`,
    'Rewind',
  );
  if (!ok) return;
  const rewound = await client.request('soba/rewind', { sessionId: report.sessionId, entryId: chosen.entryId });
  void ctx.ui.info(
    `Rewound to ${chosen.checkpointId}: ${formatTokens(rewound.budget.effectiveTokens)} / ${formatTokens(rewound.budget.hardLimit)} tokens.`,
  );
  ctx.refresh();
}

/** "Show context": what fills the window, like Claude Code's `/context`. */
export async function showContext(ctx: CommandContext): Promise<void> {
  const result = await requireClient(ctx).request('soba/context', { ...ctx.target(), limit: 15 });
  ctx.ui.showDocument('context', contextMarkdown(result));
}

/** The capsule in force, as the model reads it. */
export async function viewCapsule(ctx: CommandContext): Promise<void> {
  const result = await requireClient(ctx).request('soba/context', { ...ctx.target(), limit: 0 });
  const doc = capsuleDocument(result);
  if (!doc) {
    void ctx.ui.info('The active session has no capsule yet: it has not been compacted.');
    return;
  }
  ctx.ui.showDocument('capsule', doc);
}

export async function showFlightRecords(ctx: CommandContext): Promise<void> {
  const { records } = await requireClient(ctx).request('soba/flight', {
    ...ctx.target(),
    limit: ctx.settings().flightRecordLimit,
  });
  ctx.ui.showLines(flightLines(records));
}

const METHOD_NOT_FOUND = -32601;

function errorMessage(err: unknown): string {
  const code = (err as { code?: unknown } | null)?.code;
  const data = (err as { data?: unknown } | null)?.data;
  if (code === METHOD_NOT_FOUND) {
    return `${typeof data === 'string' ? data : 'this request'} is not supported by this soba daemon: update soba`;
  }
  return err instanceof Error ? err.message : String(err);
}

/** The handler for every contributed command; errors become one error message, never a throw. */
export function commandHandlers(ctx: CommandContext): Record<CommandId, CommandHandler> {
  const guarded =
    (fn: (ctx: CommandContext, arg?: unknown) => Promise<void>): CommandHandler =>
    async (arg?: unknown) => {
      try {
        await fn(ctx, arg);
      } catch (err) {
        ctx.ui.error(`SOBA: ${errorMessage(err)}`);
      }
    };
  return {
    'soba.compact': guarded(compact),
    'soba.showBudget': guarded(showBudget),
    'soba.autoCompactOn': guarded(autoCompactOn),
    'soba.autoCompactOff': guarded(autoCompactOff),
    'soba.createCapsule': guarded(createCapsule),
    'soba.exportCapsule': guarded(exportCapsule),
    'soba.loadCapsule': guarded(loadCapsule),
    'soba.showFlightRecords': guarded(showFlightRecords),
    'soba.rewind': guarded(rewind),
    'soba.showContext': guarded(showContext),
    'soba.viewCapsule': guarded(viewCapsule),
    'soba.cancelCompaction': guarded(cancelCompaction),
  };
}
