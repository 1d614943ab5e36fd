// The "show context" view, like Claude Code's `/context`: what fills the window by part, by kind
// and by largest entry, from `soba/context`. Pure text; the adapter opens it as a document.

import type { ContextResult } from './protocol';
import { formatTokens, uncountedPart } from './status';

const BAR_WIDTH = 24;

function percentOf(part: number, whole: number): number {
  return whole > 0 ? Math.round((part / whole) * 100) : 0;
}

/** `██████░░░░…`: the share of the hard limit a part takes. */
export function bar(part: number, whole: number, width = BAR_WIDTH): string {
  const filled = whole > 0 ? Math.min(width, Math.round((part / whole) * width)) : 0;
  return '█'.repeat(filled) + '░'.repeat(width - filled);
}

function row(label: string, tokens: number, whole: number): string {
  return `| ${label} | ${formatTokens(tokens)} | ${percentOf(tokens, whole)}% | \`${bar(tokens, whole)}\` |`;
}

/** The whole view as Markdown. */
export function contextMarkdown(ctx: ContextResult): string {
  const limit = ctx.hardLimit;
  const free = Math.max(0, limit - ctx.effectiveTokens);
  const uncounted = uncountedPart(ctx.effectiveTokens, ctx.breakdown, ctx.source);
  const lines = [
    `# Context of session ${ctx.sessionId}`,
    '',
    `**${formatTokens(ctx.effectiveTokens)} / ${formatTokens(limit)} tokens** (${percentOf(ctx.effectiveTokens, limit)}% of the hard limit), ` +
      `${formatTokens(free)} free; ` +
      (ctx.control?.compactedBy === 'agent' ? ctx.control.note : `auto-compaction starts past ${formatTokens(ctx.softLimit)}.`),
    '',
    '## By part',
    '',
    '| part | tokens | of limit | |',
    '|---|---:|---:|---|',
    row('System prompt', ctx.breakdown.system, limit),
    row('Tool schemas', ctx.breakdown.tools, limit),
    row('Capsule', ctx.breakdown.capsule, limit),
    row('Retained tail', ctx.breakdown.retainedTail, limit),
    row('New entries', ctx.breakdown.newEntries, limit),
    // soba/context's parts are SOBA's counts of the log only: the rest of the total (what the
    // provider counts beyond the log, or an estimate's scale and allowance) is one more part, so
    // the parts above `Free` sum to the total.
    ...(uncounted ? [row(uncounted.label, uncounted.tokens, limit)] : []),
    row('Free', free, limit),
    '',
    '## By kind',
    '',
    '| kind | tokens | of limit | |',
    '|---|---:|---:|---|',
    row('User messages', ctx.byKind.userMessages, limit),
    row('Assistant messages', ctx.byKind.assistantMessages, limit),
    row('File reads', ctx.byKind.fileReads, limit),
    row('Tool outputs', ctx.byKind.toolOutputs, limit),
    row('Capsule', ctx.byKind.capsule, limit),
    row('System + tool schemas', ctx.byKind.system + ctx.byKind.toolSchemas, limit),
    // The same rest as under "By part", so that the kinds too add up to the total.
    ...(uncounted ? [row(uncounted.label, uncounted.tokens, limit)] : []),
    '',
    '## Largest entries',
    '',
  ];
  if (ctx.largest.length === 0) {
    lines.push('Nothing in the context yet.');
  } else {
    lines.push('| tokens | kind | entry | part |', '|---:|---|---|---|');
    for (const e of ctx.largest) {
      const what = e.label.replace(/\|/g, '\\|') + (e.elided ? ' (shortened)' : '');
      lines.push(`| ${formatTokens(e.tokens)} | ${e.kind.replace('_', ' ')} | ${what} | ${e.part.replace('_', ' ')}${e.entryId ? ` · \`${e.entryId}\`` : ''} |`);
    }
  }
  lines.push('', '## Capsule in force', '');
  const agent = ctx.agentSummary;
  if (agent) {
    lines.push(
      `The ${agentLabel(agent.agent)}'s own compaction summary (${agent.trigger ?? 'compaction'}, \`${agent.entryId}\`), ` +
        `${formatTokens(agent.tokens)} tokens: the agent's context starts from it. *SOBA: View Current Capsule* shows it.`,
    );
  } else if (ctx.capsule) {
    const c = ctx.capsule;
    lines.push(
      `\`${c.checkpointId}\`${c.title ? ` “${c.title}”` : ''}: ${c.trigger}, ${c.quality}, ${formatTokens(c.tokens)} tokens. ` +
        '*SOBA: View Current Capsule* shows it as the model reads it.',
    );
  } else {
    lines.push('None yet: the session has not been compacted.');
  }
  return lines.join('\n') + '\n';
}

const AGENT_LABELS: Record<string, string> = { 'claude-code': 'Claude Code', codex: 'Codex', pi: 'pi' };

function agentLabel(agent: string): string {
  return AGENT_LABELS[agent] ?? agent;
}

/**
 * The capsule in force, as the model reads it, with a header naming it: for a followed agent
 * that compacted itself, its own summary, which its context starts from.
 */
export function capsuleDocument(ctx: ContextResult): string | undefined {
  const agent = ctx.agentSummary;
  if (agent) {
    return (
      `<!-- ${agentLabel(agent.agent)}'s own compaction summary (${agent.trigger ?? 'compaction'}, ${agent.entryId}, ${agent.ts}): ` +
      `${formatTokens(agent.tokens)} tokens -->\n\n${agent.text}\n`
    );
  }
  const c = ctx.capsule;
  if (!c) return undefined;
  const title = c.title ? ` “${c.title}”` : '';
  return `<!-- SOBA capsule ${c.checkpointId}${title}: ${c.trigger}, ${c.quality}, ${formatTokens(c.tokens)} tokens -->\n\n${c.text}\n`;
}
