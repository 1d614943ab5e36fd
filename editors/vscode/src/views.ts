// View models for the sidebar: plain data the tree view adapter renders. No `vscode` import.

import type { BudgetReport, CapsuleSummary, FlightRecord, Quality, SessionSummary } from './protocol';
import {
  agentCompactionLine,
  agentName,
  fallbackWhy,
  followedAgent,
  formatTokens,
  HANDOFF,
  reclaimedPercent,
  sourceLabel,
  statusText,
  uncountedPart,
} from './status';

export interface TreeNode {
  id: string;
  label: string;
  description?: string;
  tooltip?: string;
  /** Codicon name. */
  icon?: string;
  /** Matched by `viewItem == …` in package.json menus. */
  contextValue?: string;
  /** A command run when the item is clicked, with the node as its argument. */
  command?: string;
  checkpointId?: string;
  sessionId?: string;
}

export const VIEW_IDS = {
  sessions: 'soba.sessions',
  budget: 'soba.budget',
  compactions: 'soba.compactions',
  capsules: 'soba.capsules',
} as const;

export function sessionNodes(sessions: readonly SessionSummary[]): TreeNode[] {
  return sessions.map((s) => ({
    id: `session:${s.sessionId}`,
    label: s.sessionId,
    description: `${s.active ? 'active · ' : ''}${formatTokens(s.effectiveTokens)} / ${formatTokens(s.hardLimit)} · ${s.entries} entries`,
    tooltip: s.path,
    icon: s.active ? 'circle-filled' : 'circle-outline',
    contextValue: s.active ? 'session.active' : 'session',
    sessionId: s.sessionId,
  }));
}

/**
 * The limits a followed agent lives by: where it compacts itself (or that its model is not known
 * yet), SOBA's hard limit named as SOBA's, and the agent's own latest compaction.
 */
function followedLimitNodes(report: BudgetReport, now: Date): TreeNode[] {
  const agent = followedAgent(report);
  if (!agent) return [{ id: 'budget:soft', label: 'Soft limit', description: formatTokens(report.softLimit), icon: 'warning' }];
  const name = agentName(report);
  return [
    {
      id: 'budget:agentCompactsAt',
      label: `${name} compacts at`,
      description:
        agent.modelSource === 'unknown'
          ? 'model not known yet'
          : agent.compactsAt != null
            ? `~${formatTokens(agent.compactsAt)} · ${agent.model ?? ''}${agent.modelSource === 'settings' ? ' (its default)' : ''}`
            : `never by itself · ${agent.model ?? ''}`,
      tooltip: [agent.text, agent.compactsAtBasis, ...(agent.problems ?? [])].join('\n'),
      icon: 'warning',
    },
    { id: 'budget:sobaHard', label: "SOBA's hard limit", description: formatTokens(report.hardLimit), icon: 'symbol-number' },
    {
      id: 'budget:agentLast',
      label: 'Last compaction',
      description: agent.lastCompaction ? agentCompactionLine(name, agent.lastCompaction, now) : 'none yet',
      icon: 'history',
    },
  ];
}

export function budgetNodes(report: BudgetReport | undefined, now: Date = new Date()): TreeNode[] {
  if (!report) return [{ id: 'budget:none', label: 'No active session', icon: 'info' }];
  type Part = 'system' | 'tools' | 'capsule' | 'retainedTail' | 'newEntries' | 'notInLog';
  const part = (key: Part, label: string): TreeNode => ({
    id: `budget:${key}`,
    label,
    description: formatTokens(report.breakdown[key] ?? 0),
    icon: 'symbol-number',
  });
  const notInLog = report.breakdown.notInLog ?? 0;
  const uncounted = uncountedPart(report.effectiveTokens, report.breakdown, report.source);
  return [
    {
      id: 'budget:total',
      label: 'Effective',
      description: `${statusText(report)} (${sourceLabel(report.source)})`,
      icon: 'dashboard',
      command: 'soba.showBudget',
    },
    ...followedLimitNodes(report, now),
    part('system', 'System prompt'),
    part('tools', 'Tool schemas'),
    part('capsule', 'Capsule'),
    part('retainedTail', 'Retained tail'),
    part('newEntries', 'New entries'),
    // Counted by the provider but absent from the log: no compaction can reclaim it.
    // Before the session's usage anchors the budget, an allowance for the agent's system prompt
    // and tools; the tooltip says where it comes from.
    ...(notInLog > 0
      ? [{ ...part('notInLog', 'Not in the log'), tooltip: report.breakdown.unseenText ?? undefined }]
      : []),
    // The rest of the total, so the parts add up to it (see `uncountedPart`).
    ...(uncounted
      ? [{ id: 'budget:uncounted', label: uncounted.label, description: formatTokens(uncounted.tokens), icon: 'symbol-number' }]
      : []),
    report.control?.compactedBy === 'agent'
      ? {
          // SOBA's auto-compact never runs for an agent it only follows: say who compacts.
          id: 'budget:compactedBy',
          label: 'Compacted by',
          description: `${report.control.agent ?? 'the agent'} itself`,
          tooltip: `${report.control.note}\n${report.control.actions}`,
          icon: 'eye',
        }
      : {
          id: 'budget:auto',
          label: 'Auto-compact',
          description: report.autoCompact ? 'on' : 'off',
          icon: report.autoCompact ? 'check' : 'circle-slash',
        },
  ];
}

/** What a completed compaction's quality means, for its tooltip. */
function qualityMeaning(quality: Quality, reason: string): string {
  switch (quality) {
    case 'model':
      return 'Quality: model (the summarization model wrote the capsule)';
    case 'local':
      return 'Quality: local (SOBA built the capsule from the log; no summarization model is configured)';
    case 'degraded':
      return `Quality: degraded (${fallbackWhy(reason)}: the summarization model failed, so the local capsule stands in)`;
  }
}

/**
 * Most recent first. A completed one shows its capsule's quality (from `capsules`, by checkpoint):
 * model, local, or degraded with why in a few words, the whole reason in its tooltip.
 */
export function compactionNodes(records: readonly FlightRecord[], capsules: readonly CapsuleSummary[] = [], limit = 10): TreeNode[] {
  const quality = new Map(capsules.map((c) => [c.checkpointId, c.quality]));
  return [...records]
    // A created capsule records the state and compacts nothing: the Capsules view lists it.
    .filter((r) => r.trigger !== HANDOFF)
    .sort((a, b) => b.ts.localeCompare(a.ts))
    .slice(0, limit)
    .map((r) => {
      const q = r.outcome === 'completed' && r.checkpointId ? quality.get(r.checkpointId) : undefined;
      const reclaimed = `−${reclaimedPercent(r.tokensBefore, r.tokensAfter)}% (${formatTokens(r.tokensBefore)} → ${formatTokens(r.tokensAfter)})`;
      return {
        id: `compaction:${r.operationId}`,
        label: `${q ?? r.outcome} · ${r.trigger}`,
        description: r.outcome === 'completed' ? (q === 'degraded' ? `${reclaimed} · ${fallbackWhy(r.reason)}` : reclaimed) : r.reason,
        tooltip: [
          `${r.ts} · ${r.durationMs} ms · ${r.checkpointId ?? 'no checkpoint'}`,
          ...(q ? [qualityMeaning(q, r.reason)] : []),
          r.reason,
        ].join('\n'),
        icon:
          r.outcome === 'failed' ? 'error' : q === 'degraded' ? 'warning' : r.outcome === 'completed' ? 'pass' : 'circle-slash',
        checkpointId: r.checkpointId ?? undefined,
      };
    });
}

/** A capsule's own size on the budget's scale: the one figure every view gives for it. */
export function capsuleSize(c: CapsuleSummary): number {
  return c.tokens.capsule;
}

export function capsuleNodes(capsules: readonly CapsuleSummary[]): TreeNode[] {
  return capsules.map((c) => ({
    id: `capsule:${c.checkpointId}`,
    label: c.title || c.checkpointId,
    description: `${c.checkpointId} · ${formatTokens(capsuleSize(c))} · ${c.quality}${c.origin === 'loaded' ? ' · loaded' : ''}`,
    tooltip:
      `${c.trigger} at ${c.ts}: the capsule is ${formatTokens(capsuleSize(c))} tokens` +
      (c.trigger === HANDOFF ? '' : `; the context went ${formatTokens(c.tokens.before)} → ${formatTokens(c.tokens.after)} tokens`),
    icon: 'package',
    contextValue: 'capsule',
    checkpointId: c.checkpointId,
  }));
}

/** Lines for *SOBA: Show Flight Records*, most recent first. */
export function flightLines(records: readonly FlightRecord[]): string[] {
  if (records.length === 0) return ['No flight records yet.'];
  return [...records]
    .sort((a, b) => b.ts.localeCompare(a.ts))
    .map(
      (r) =>
        `${r.ts}  ${r.outcome.padEnd(9)} ${r.trigger.padEnd(16)} ` +
        `${formatTokens(r.tokensBefore)} → ${formatTokens(r.tokensAfter)} ` +
        `(hard ${formatTokens(r.hardLimit)}, soft ${formatTokens(r.softLimit)})  ${r.durationMs} ms  ` +
        `${r.checkpointId ?? '-'}  ${r.sessionId}  ${r.reason}`,
    );
}
