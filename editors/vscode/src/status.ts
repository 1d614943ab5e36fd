// Status bar logic as a pure unit: text, colour and tooltip from a BudgetReport, the choice of
// which report to show, and the compaction progress model. No `vscode` import: the adapter in
// extension.ts turns these values into a StatusBarItem and progress notifications.

import type { BudgetReport, CompactionNotification, CompactionResult, ContextResult, FlightRecord, LastCompaction } from './protocol';

/** `950`, `1.2k`, `48.8k`, `128k`, `1.2M`: short enough for a status bar, exact enough to act on. */
export function formatTokens(tokens: number): string {
  const n = Math.max(0, Math.round(tokens));
  if (n < 1000) return String(n);
  if (n < 999_950) return trimZero((n / 1000).toFixed(1)) + 'k';
  return trimZero((n / 1_000_000).toFixed(1)) + 'M';
}

function trimZero(fixed: string): string {
  return fixed.endsWith('.0') ? fixed.slice(0, -2) : fixed;
}

/** What a followed agent's model and threshold are, as the daemon sees them; absent for a driven session. */
export type FollowedAgent = NonNullable<BudgetReport['followed']>;
export type AgentCompaction = NonNullable<FollowedAgent['lastCompaction']>;

/** The followed agent's own view of itself, for a session SOBA only follows. */
export function followedAgent(report: BudgetReport): FollowedAgent | undefined {
  return report.control?.compactedBy === 'agent' ? (report.followed ?? undefined) : undefined;
}

/** Before a followed agent's first response names its model: no limit is the agent's yet. */
export function modelNotKnownYet(report: BudgetReport): boolean {
  return followedAgent(report)?.modelSource === 'unknown';
}

/**
 * The limit the bar measures against: for a followed agent, the threshold at which it compacts
 * itself (SOBA's hard limit is SOBA's, not the agent's); otherwise SOBA's hard limit.
 */
export function barLimit(report: BudgetReport): number {
  return followedAgent(report)?.compactsAt ?? report.hardLimit;
}

/**
 * `31.2k / 48.8k`: the active session's effective tokens against the limit that matters: SOBA's
 * hard limit, or where a followed agent compacts itself; `30 · model not known yet` before a
 * followed agent has named its model, never another model's limits.
 */
export function statusText(report: BudgetReport): string {
  if (modelNotKnownYet(report)) return `${formatTokens(report.effectiveTokens)} · model not known yet`;
  return `${formatTokens(report.effectiveTokens)} / ${formatTokens(barLimit(report))}`;
}

/** `31.2k / 48.8k tokens`, or `30 tokens, model not known yet`: the figure in a sentence. */
export function budgetFigure(report: BudgetReport): string {
  if (modelNotKnownYet(report)) return `${formatTokens(report.effectiveTokens)} tokens, model not known yet`;
  return `${statusText(report)} tokens`;
}

export type Severity = 'normal' | 'warning' | 'error';

/**
 * Warning past the soft limit (auto-compaction territory), error at the hard limit. A followed
 * agent is healthy under its own threshold and compacts itself at it: a warning there, never an
 * error for SOBA's limit, and nothing while its model is not known.
 */
export function severity(report: BudgetReport): Severity {
  const agent = followedAgent(report);
  if (agent) {
    if (agent.compactsAt == null) return 'normal';
    return report.effectiveTokens >= agent.compactsAt ? 'warning' : 'normal';
  }
  if (report.effectiveTokens >= report.hardLimit) return 'error';
  if (report.effectiveTokens > report.softLimit) return 'warning';
  return 'normal';
}

/** The theme colour ids VS Code reserves for status bar items in these states. */
export function backgroundColorId(level: Severity): string | undefined {
  switch (level) {
    case 'error':
      return 'statusBarItem.errorBackground';
    case 'warning':
      return 'statusBarItem.warningBackground';
    case 'normal':
      return undefined;
  }
}

/** The status bar item's full text, with a codicon that says what state the budget is in. */
export function statusBarText(report: BudgetReport): string {
  const icon = report.compacting
    ? '$(sync~spin)'
    : report.compactQueued
      ? '$(clock)'
      : severity(report) === 'normal'
        ? '$(dashboard)'
        : '$(warning)';
  return `${icon} ${statusText(report)}`;
}

export function sourceLabel(source: BudgetReport['source']): string {
  return source === 'provider_usage' ? 'provider usage' : 'estimated';
}

/**
 * The part of the total that no part the daemon sends holds, so that the parts add up to the
 * total. The parts are SOBA's counts of the log plus `notInLog` (what the provider counted beyond
 * the log, or for an estimate the unseen-context allowance), shown as a part of its own. With an
 * estimate the rest is the factor that scales SOBA's count for a tokenizer that is not the
 * model's own; with provider usage from a daemon that sends no `notInLog`, what the provider
 * counted that is not in the log. Every numeric part the daemon sends counts, whatever its name.
 */
export function uncountedPart(
  total: number,
  breakdown: BudgetReport['breakdown'] | ContextResult['breakdown'],
  source: BudgetReport['source'],
): { label: string; tokens: number } | undefined {
  // `notInLog` is a part of its own (the provider's count beyond the log, or the allowance an
  // estimate keeps for it): counted here, so it is never shown twice.
  const counted = Object.entries(breakdown)
    .filter(([, value]) => typeof value === 'number')
    .reduce((sum, [, value]) => sum + (value as number), 0);
  const rest = Math.round(total - counted);
  if (rest <= 0) return undefined;
  return { label: source === 'provider_usage' ? 'Not in the log' : 'Tokenizer scale', tokens: rest };
}

/** What the measurement source means for the figure shown, in one sentence. */
export function sourceExplanation(report: BudgetReport): string {
  const c = report.calibration;
  const ownTokenizer = !c || c.source === 'exact';
  const tokenizer = ownTokenizer
    ? `${report.tokenizer}, the model's own tokenizer`
    : `${c.tokenizer}, not the model's own tokenizer (scaled × ${c.factor.toFixed(2)})`;
  return report.source === 'provider_usage'
    ? `Provider usage: the input tokens the provider reported for the last response, plus what came after it counted with ${tokenizer}`
    : `Estimated: no usage report from the provider since the latest capsule, so SOBA counted the context with ${tokenizer}`;
}

/** The tokenizer the budget counts with, and the factor on it where there is one. */
export function countedWith(report: BudgetReport): string {
  const c = report.calibration;
  if (!c || c.source === 'exact' || c.factor <= 1) {
    return report.tokenizer;
  }
  const from = {
    catalog: 'catalog factor',
    config: 'model.countFactor',
    session: 'learned from this session',
    provisional: 'catalog factor + margin until a usage report teaches one',
  }[c.source];
  return `${c.tokenizer} × ${c.factor.toFixed(2)}, ${from}`;
}

export function reclaimedPercent(before: number, after: number): number {
  if (before <= 0) return 0;
  return Math.round(((before - after) / before) * 100);
}

/** `5 min ago`, for the tooltip; `now` is passed in so the function stays pure. */
export function timeAgo(ts: string, now: Date): string {
  const then = Date.parse(ts);
  if (Number.isNaN(then)) return ts;
  const seconds = Math.max(0, Math.round((now.getTime() - then) / 1000));
  if (seconds < 60) return 'just now';
  const minutes = Math.round(seconds / 60);
  if (minutes < 60) return `${minutes} min ago`;
  const hours = Math.round(minutes / 60);
  if (hours < 48) return `${hours} h ago`;
  return `${Math.round(hours / 24)} days ago`;
}

const AGENT_NAMES: Record<string, string> = { 'claude-code': 'Claude Code', codex: 'Codex', pi: 'pi' };

/** `Claude Code`, from the daemon's `claude-code`. */
export function agentName(report: BudgetReport): string {
  const agent = report.control?.agent;
  return agent ? (AGENT_NAMES[agent] ?? agent) : 'the agent';
}

/** `Claude Code's own (auto): 150k → summary 2.2k, 5 min ago`: the agent's compaction of itself. */
export function agentCompactionLine(name: string, c: AgentCompaction, now: Date): string {
  const before = c.tokensBefore != null ? `${formatTokens(c.tokensBefore)} → ` : '';
  const summary = c.summaryTokens != null ? `summary ${formatTokens(c.summaryTokens)}` : 'summary';
  return `${name}'s own${c.trigger ? ` (${c.trigger})` : ''}: ${before}${summary}, ${timeAgo(c.ts, now)}`;
}

/**
 * The session's last compaction, whoever made it: SOBA's capsule, or for a followed agent its
 * own compaction when that came later (or SOBA wrote none).
 */
export function lastCompactionOf(report: BudgetReport, now: Date): string {
  const own = followedAgent(report)?.lastCompaction ?? undefined;
  const soba = report.lastCompaction;
  if (own && (!soba || own.ts >= soba.ts)) return agentCompactionLine(agentName(report), own, now);
  return lastCompactionLine(soba, now);
}

export function lastCompactionLine(last: LastCompaction | null, now: Date): string {
  if (!last) return 'none yet';
  const pct = reclaimedPercent(last.tokensBefore, last.tokensAfter);
  return (
    `${last.trigger}: ${formatTokens(last.tokensBefore)} → ${formatTokens(last.tokensAfter)} ` +
    `(−${pct}%), ${last.checkpointId}, ${last.quality}, ${timeAgo(last.ts, now)}`
  );
}

/**
 * How much room is left before auto-compaction starts, as Claude Code's "context left until
 * auto-compact": the tokens still free below the soft limit, as a percent of the soft limit.
 */
export function percentLeftUntilAutoCompact(report: BudgetReport): number {
  if (report.softLimit <= 0) return 0;
  const left = Math.max(0, report.softLimit - report.effectiveTokens);
  return Math.floor((left / report.softLimit) * 100);
}

/** `Auto-compact: on, 23% left (1.3k tokens) until it starts`, or what holds instead. */
export function autoCompactLine(report: BudgetReport): string {
  const left = Math.max(0, report.softLimit - report.effectiveTokens);
  const pct = percentLeftUntilAutoCompact(report);
  if (!report.autoCompact) {
    return left > 0
      ? `Auto-compact: off (${pct}% left until the soft limit; compaction still runs at the hard limit)`
      : 'Auto-compact: off, past the soft limit (compaction still runs at the hard limit)';
  }
  return left > 0
    ? `Auto-compact: on, ${pct}% left (${formatTokens(left)} tokens) until it starts`
    : 'Auto-compact: on, 0% left: past the soft limit, it compacts before the next response';
}

/** Whether the agent compacts the session itself and SOBA only follows it. */
export function followed(report: BudgetReport): boolean {
  return report.control?.compactedBy === 'agent';
}

/**
 * Tooltip lines: soft limit, measurement source, who compacts, last compaction. For a session
 * SOBA follows, the daemon's sentence says who compacts instead of SOBA's auto-compact promise.
 */
export function tooltipLines(report: BudgetReport, now: Date): string[] {
  const agent = followedAgent(report);
  const limits = agent
    ? // The agent's own threshold, with SOBA's hard limit named as SOBA's (or that no limit is
      // known before its model is).
      [agent.text, ...(agent.problems ?? [])]
    : followed(report)
      ? [`Soft limit: ${formatTokens(report.softLimit)}`]
      : [`Soft limit: ${formatTokens(report.softLimit)} (auto-compaction starts past it)`];
  const model = agent && agent.modelSource === 'unknown' ? 'model not known yet' : report.model;
  return [
    `SOBA context budget: ${budgetFigure(report)}`,
    ...limits,
    `Measured: ${sourceLabel(report.source)} (${model}, ${countedWith(report)})`,
    sourceExplanation(report),
    ...(followed(report) && report.control ? [report.control.note] : [autoCompactLine(report)]),
    `Last compaction: ${lastCompactionOf(report, now)}`,
    ...(report.compacting ? ['Compacting now…'] : []),
    ...(report.compactQueued && !report.compacting
      ? ["Compaction queued: it runs when the agent's current model call ends"]
      : []),
  ];
}

/** One line for *SOBA: Show Budget* and `:Soba budget`. */
export function budgetSummary(report: BudgetReport): string {
  const agent = followedAgent(report);
  if (agent) {
    // The agent's own threshold, SOBA's hard limit named as SOBA's; no limit before its model is known.
    const at = agent.compactsAt;
    const pct = at ? ` (${Math.round((report.effectiveTokens / at) * 100)}% of where ${agentName(report)} compacts)` : '';
    return `Context budget: ${budgetFigure(report)}${pct}, ${sourceLabel(report.source)}; ${agent.text}`;
  }
  const pct = report.hardLimit > 0 ? Math.round((report.effectiveTokens / report.hardLimit) * 100) : 0;
  return (
    `Context budget: ${statusText(report)} tokens (${pct}% of the hard limit), ` +
    `soft limit ${formatTokens(report.softLimit)}, ${sourceLabel(report.source)}` +
    // A followed agent compacts the session itself: who compacts is said after this line, and
    // SOBA's auto-compact setting does not apply.
    (followed(report) ? '' : `, auto-compact ${report.autoCompact ? 'on' : 'off'}`)
  );
}

/**
 * Why a compaction fell back to the local capsule, in a few words, from the daemon's reason
 * (`the summarization model did not finish within 30000 ms; the local capsule was used`). The
 * whole reason goes to the output channel and the flight records; a notification has room for this.
 */
export function fallbackWhy(reason: string): string {
  const http = /answered HTTP (\d+)/.exec(reason);
  if (http) return `model answered HTTP ${http[1]}`;
  const known: Array<[RegExp, string]> = [
    [/did not finish within/, 'model timed out'],
    [/could not talk to the summarization model/, 'model unreachable'],
    [/stream ended before the reply was complete/, 'model reply cut off'],
    [/invalid reply from the summarization model/, 'invalid model reply'],
    [/reported an error/, 'model reported an error'],
    [/paused after \d+ consecutive failures/, 'model paused after repeated failures'],
  ];
  for (const [pattern, words] of known) if (pattern.test(reason)) return words;
  // Another reason: its first clause, short enough for one line.
  const first = reason.split(';')[0].trim();
  return first.length > 48 ? `${first.slice(0, 47).trimEnd()}…` : first || 'model failed';
}

/** `model`, `local`, or for a fallback `degraded (model timed out)`. */
export function qualityText(quality: CompactionResult['quality'], fallback: boolean, reason: string): string {
  if (fallback || quality === 'degraded') return `degraded (${fallbackWhy(reason)})`;
  return quality ?? 'unknown quality';
}

/**
 * The one line a finished compaction shows: trigger, before → after, quality, checkpoint; when
 * it fell back to the local capsule, `degraded` and why in a few words right after the trigger.
 */
export function completionLine(result: CompactionResult): string {
  if (result.trigger === HANDOFF) {
    // A created capsule records state and compacts nothing.
    return result.outcome === 'completed'
      ? `capsule created: ${result.checkpointId ?? 'no checkpoint'} (${result.quality ?? 'unknown quality'}); ` +
          `the context is unchanged at ${formatTokens(result.tokensBefore)} tokens`
      : `capsule creation ${result.outcome}: ${result.reason}`;
  }
  if (result.outcome === 'cancelled') {
    // Stopped on purpose (SOBA: Cancel Compaction, the progress's Cancel, `:Soba cancel`): not a failure.
    return `${result.trigger} compact cancelled: no capsule written; the context is unchanged`;
  }
  if (result.outcome !== 'completed') {
    return `${result.trigger} compact ${result.outcome}: ${result.reason}`;
  }
  const reclaimed =
    `${formatTokens(result.tokensBefore)} → ${formatTokens(result.tokensAfter)} tokens (−${Math.round(result.reclaimedPercent)}%)`;
  const checkpoint = result.checkpointId ?? 'no checkpoint';
  if (result.fallback || result.quality === 'degraded') {
    // Why first: a line cut to the width of a notification or a command line still says it.
    return `${result.trigger} compact, ${qualityText(result.quality, result.fallback, result.reason)}: ${reclaimed}, ${checkpoint}`;
  }
  return `${result.trigger} compact: ${reclaimed}, ${result.quality ?? 'unknown quality'}, ${checkpoint}`;
}

/** The daemon's warning after a compaction that fell back: the result line already says why. */
export function fallbackWarning(result: CompactionResult): string {
  return `The compaction used the local capsule: ${result.reason}`;
}

/**
 * The output channel's record of compactions: one line for each compaction, skip and failure,
 * with the whole reason, whether it came as a `soba/compaction` end or only as a flight record
 * (a skip sends no notification). Each operation is written once.
 */
export class CompactionLog {
  private readonly written = new Set<string>();
  private baseline = false;

  /** The line for a compaction's end, or undefined when it was written already. */
  ended(event: CompactionNotification, now: Date): string | undefined {
    if (event.phase !== 'end' || this.written.has(event.operationId)) return undefined;
    this.written.add(event.operationId);
    const r = event.result;
    if (!r) return `${now.toISOString()} ${event.trigger} failed: ${event.message ?? 'no result'}`;
    const quality = r.outcome === 'completed' ? `, ${r.quality ?? 'unknown quality'}${r.fallback ? ' (fallback)' : ''}` : '';
    return (
      `${now.toISOString()} ${r.trigger} ${r.outcome}: ${formatTokens(r.tokensBefore)} → ${formatTokens(r.tokensAfter)} tokens` +
      `${quality}, ${r.checkpointId ?? 'no checkpoint'}, ${r.durationMs} ms: ${r.reason}`
    );
  }

  /**
   * Lines for the flight records not written yet, oldest first. The first list is what happened
   * before the editor connected (*Show Flight Records* lists it): it is taken as written.
   */
  recorded(records: readonly FlightRecord[]): string[] {
    const fresh = [...records]
      .filter((r) => !this.written.has(recordKey(r)))
      .sort((a, b) => a.ts.localeCompare(b.ts));
    for (const r of fresh) this.written.add(recordKey(r));
    if (!this.baseline) {
      this.baseline = true;
      return [];
    }
    return fresh.map(
      (r) =>
        `${r.ts} ${r.trigger} ${r.outcome}: ${formatTokens(r.tokensBefore)} → ${formatTokens(r.tokensAfter)} tokens, ` +
        `${r.checkpointId ?? 'no checkpoint'}, ${r.durationMs} ms: ${r.reason}`,
    );
  }
}

/** A record's operation, or for one that never started (no id) its time and trigger. */
function recordKey(r: FlightRecord): string {
  return r.operationId || `${r.ts} ${r.trigger}`;
}

function samePath(a: string, b: string): boolean {
  const strip = (p: string) => (p.length > 1 ? p.replace(/[\\/]+$/, '') : p);
  return strip(a) === strip(b);
}

/**
 * How often an editor showing no budget asks for one again. Each miss makes the daemon look for
 * a live agent transcript of the workspace, so an agent started after the editor (or a new
 * session after the last one closed) shows up without a reload; a shown budget needs no asking,
 * the daemon announces every change.
 */
export const BUDGET_RETRY_MS = 5_000;

/**
 * Which report the status bar shows. The daemon announces every session it serves; the bar shows
 * the workspace's active session, which is the one most recently opened or changed there.
 */
export class BudgetTracker {
  private current: BudgetReport | undefined;

  constructor(private readonly workspaces: () => readonly string[]) {}

  get report(): BudgetReport | undefined {
    return this.current;
  }

  /** Takes a report from `soba/budget` or `soba/budgetChanged`; true when the shown report changed. */
  accept(report: BudgetReport): boolean {
    const folders = this.workspaces();
    if (folders.length > 0 && !folders.some((folder) => samePath(folder, report.workspace))) return false;
    this.current = report;
    return true;
  }

  clear(): void {
    this.current = undefined;
  }

  /** A session was closed: stop showing it. True when it was the one shown. */
  forget(sessionId: string): boolean {
    if (this.current?.sessionId !== sessionId) return false;
    this.current = undefined;
    return true;
  }
}

/** What the editor should do with one `soba/compaction` notification. */
export type ProgressAction =
  /** `sessionId` is the session a Cancel on the progress stops (`soba/cancel`). */
  | { kind: 'begin'; operationId: string; sessionId: string; title: string }
  | { kind: 'report'; operationId: string; increment: number; message: string }
  /** `line` is undefined when the result was already shown (by the command that asked for it). */
  | { kind: 'end'; operationId: string; line: string | undefined; warning: boolean };

export const PROGRESS_TITLE = 'Compacting context';

/** The trigger of `soba/capsule/create`: a capsule created on purpose, not a compaction. */
export const HANDOFF = 'handoff';
export const CREATING_CAPSULE_TITLE = 'Creating capsule';

function progressTitle(trigger: string): string {
  return trigger === HANDOFF ? CREATING_CAPSULE_TITLE : `${PROGRESS_TITLE} (${trigger})`;
}

/**
 * Turns the daemon's compaction notifications into begin / report / end actions, with the
 * increments VS Code's progress API wants (it adds them up) computed from absolute percents.
 */
export class CompactionProgress {
  private readonly percentSoFar = new Map<string, number>();
  private readonly announced = new Set<string>();
  /** The session of each operation between its first notification and its end, oldest first. */
  private readonly sessions = new Map<string, string>();
  /** Fallback warnings the daemon is about to send whose why a result line already shows. */
  private readonly absorbed = new Set<string>();

  handle(event: CompactionNotification): ProgressAction[] {
    const id = event.operationId;
    switch (event.phase) {
      case 'start':
        this.percentSoFar.set(id, 0);
        this.sessions.set(id, event.sessionId);
        return [{ kind: 'begin', operationId: id, sessionId: event.sessionId, title: event.title ?? progressTitle(event.trigger) }];
      case 'progress': {
        const actions: ProgressAction[] = [];
        if (!this.percentSoFar.has(id)) {
          this.percentSoFar.set(id, 0);
          this.sessions.set(id, event.sessionId);
          actions.push({ kind: 'begin', operationId: id, sessionId: event.sessionId, title: progressTitle(event.trigger) });
        }
        const before = this.percentSoFar.get(id) ?? 0;
        const percent = Math.min(100, Math.max(before, event.percent ?? before));
        this.percentSoFar.set(id, percent);
        actions.push({ kind: 'report', operationId: id, increment: percent - before, message: `${Math.round(percent)}%` });
        return actions;
      }
      case 'end': {
        this.percentSoFar.delete(id);
        this.sessions.delete(id);
        // The daemon follows a fallback's end with a warning of the whole reason; the result
        // line says why in a few words, so that warning goes to the output, not a second toast.
        if (event.result?.fallback && event.trigger !== HANDOFF) this.absorbed.add(fallbackWarning(event.result));
        if (this.announced.has(id)) return [{ kind: 'end', operationId: id, line: undefined, warning: false }];
        this.announced.add(id);
        // *Create Capsule* reports its own result (or error): one message, not two.
        if (event.trigger === HANDOFF) return [{ kind: 'end', operationId: id, line: undefined, warning: false }];
        // The editor's own line from the result (it says the quality, and why a fallback fell
        // back); the daemon's message only when there is no result (the compaction could not be written).
        const line = event.result ? completionLine(event.result) : (event.message ?? `${event.trigger} compact finished`);
        const warning = event.result ? event.result.fallback || event.result.outcome === 'failed' : false;
        return [{ kind: 'end', operationId: id, line, warning }];
      }
    }
  }

  /**
   * Whether a `window/showMessage` from the daemon repeats the fallback of a compaction whose
   * result line was shown (or is being shown by the command that asked for it): true once.
   */
  absorbs(message: string): boolean {
    return this.absorbed.delete(message);
  }

  /**
   * The session whose compaction started most recently and has not ended (the agent's own, seen
   * through notifications, or one an editor asked for), or undefined when none runs.
   */
  runningSession(): string | undefined {
    return [...this.sessions.values()].pop();
  }

  /**
   * Claims the showing of an operation's result: true the first time, false once the daemon's
   * `end` notification or an earlier claim showed it. The response to `soba/compact` and the
   * `end` notification may arrive in either order; the result is shown once.
   */
  claim(operationId: string): boolean {
    if (this.announced.has(operationId)) return false;
    this.announced.add(operationId);
    return true;
  }
}

/** The status bar before any agent session in the workspace: the daemon is there, no agent yet. */
export const IDLE_TEXT = '$(dashboard) SOBA: no agent session';

/** What the idle status bar item says on hover: that SOBA works, and how a session appears. */
export function idleTooltipLines(): string[] {
  return [
    'SOBA is connected: no agent session in this workspace yet.',
    'A session appears here by itself when an agent opens one: an agent through the SOBA SDK, ' +
      'one started with `soba proxy`, or a Claude Code, Codex or pi session in this folder ' +
      '(followed by itself, or with `soba attach`).',
  ];
}
