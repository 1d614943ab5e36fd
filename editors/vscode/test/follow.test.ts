// A user who runs Claude Code and opens the workspace in VS Code sees that agent's live budget
// with nothing set up: the bundle against the real daemon, which finds the transcript in the
// agent's (temporary) home, follows it as it grows and lets it go when the agent is idle.

import assert from 'node:assert/strict';
import * as fs from 'node:fs';
import * as path from 'node:path';
import { describe, it, type TestContext } from 'node:test';
import type { BudgetReport } from '../src/protocol';
import { BUDGET_RETRY_MS, IDLE_TEXT, statusBarText } from '../src/status';
import { AgentHome, appendRecords, ClaudeSession, SHARED_TRANSCRIPTS } from './agents';
import { SOBA_BIN, WAIT_MS } from './daemon';
import { activate, waitFor, type Recorded } from './host';

/** Long enough for the test's own steps between writes, short enough to wait for. */
const IDLE_SECS = 8;

type Measured = Pick<BudgetReport, 'effectiveTokens' | 'hardLimit' | 'softLimit' | 'contextWindow' | 'maxOutputTokens'>;

/**
 * Where Claude Code compacts itself for the budget's model: its window less what it keeps for
 * output (at most 20k) less its 13k auto-compact buffer.
 */
function claudeCodeCompactsAt(budget: Measured): number {
  return budget.contextWindow - Math.min(budget.maxOutputTokens, 20_000) - 13_000;
}

/**
 * The status bar text of a followed Claude Code session's measured budget, with no compaction
 * running: measured against the threshold at which Claude Code compacts itself.
 */
function barText(budget: Measured): string {
  return statusBarText({
    ...budget,
    compacting: false,
    compactQueued: false,
    control: { compactedBy: 'agent', agent: 'claude-code', note: '', actions: '' },
    followed: { modelSource: 'transcript', compactsAt: claudeCodeCompactsAt(budget), compactsAtBasis: '', text: '' },
  } as BudgetReport);
}

async function showing(recorded: Recorded, text: string, what: string, ms = WAIT_MS): Promise<void> {
  try {
    await waitFor(() => recorded.status.visible && recorded.status.text === text, ms);
  } catch {
    assert.fail(`the status bar never showed ${what} (${text}); it shows ${JSON.stringify(recorded.status)}`);
  }
}

/** The bar lets go of the budget: it says the extension waits for an agent session. */
async function idle(recorded: Recorded, what: string, ms = WAIT_MS): Promise<void> {
  try {
    await waitFor(() => recorded.status.visible && recorded.status.text === IDLE_TEXT, ms);
  } catch {
    assert.fail(`the status bar still shows ${JSON.stringify(recorded.status.text)} after ${what}`);
  }
}

/** Runs `during` with the extension active in `home`'s workspace and its environment. */
async function withEditor(
  home: AgentHome,
  settings: Record<string, unknown>,
  during: (recorded: Recorded) => Promise<void>,
): Promise<void> {
  assert.ok(fs.existsSync(SOBA_BIN), `no daemon binary at ${SOBA_BIN}: run cargo build --bin soba or set SOBA_BIN`);
  const saved = { ...process.env };
  // The language client starts the daemon with this process's environment.
  Object.assign(process.env, home.env(IDLE_SECS));
  try {
    await activate({ serverPath: SOBA_BIN, ...settings }, [home.workspace], async (recorded) => {
      assert.deepEqual(recorded.errors, [], 'the daemon started');
      await during(recorded);
    });
  } finally {
    process.env = saved;
  }
}

describe('a running agent in the status bar', () => {
  it('shows the workspace\'s Claude Code budget, follows the transcript and lets it go when the agent is idle', { timeout: 120_000 }, async () => {
    const home = new AgentHome();
    try {
      const agent = new ClaudeSession(home.transcript('7d1c2f'), home.workspace);
      agent.prompt('list the files', 2_000);
      // The user's settings: only where soba is; the editor relays to the shared daemon.
      await withEditor(home, {}, async (recorded) => {
        const first = home.importedBudget(agent.file);
        assert.equal(first.effectiveTokens, 2_010, 'the provider usage of the last response');
        assert.equal(first.source, 'provider_usage');
        await showing(recorded, barText(first), 'the transcript\'s budget');
        assert.match(recorded.status.tooltip, /Measured: provider usage \(claude-sonnet-4-5, /);

        // The agent works on: a tool call with a large result, then the next response.
        agent.toolCall('cat src/parser.rs', 2_100, 4_000);
        const grown = home.importedBudget(agent.file);
        assert.ok(grown.effectiveTokens > first.effectiveTokens + 3_000, `${first.effectiveTokens} → ${grown.effectiveTokens}`);
        await showing(recorded, barText(grown), 'the budget with the large tool result');
        agent.prompt('now fix the failing test', 6_500);
        const answered = home.importedBudget(agent.file);
        assert.equal(answered.effectiveTokens, 6_510);
        await showing(recorded, barText(answered), 'the budget of the next response');
        await waitFor(() => recorded.views.get('soba.sessions')!.getChildren().some((n) => n.label === 'claude-code-7d1c2f'));

        // The agent stops writing: after the idle time its session closes and the bar goes.
        await idle(recorded, 'the agent went idle', (IDLE_SECS + 10) * 1000);
        // The editor asked for the workspace's next session at once; there was none yet.
        await waitFor(() => recorded.output.some((line) => /^SOBA: budget: .*no active session/.test(line)));

        // A new Claude Code session in the same workspace: the editor asks again and shows it.
        const next = new ClaudeSession(home.transcript('9e4a01'), home.workspace);
        next.prompt('start over', 3_300);
        await showing(recorded, barText(home.importedBudget(next.file)), 'the next session', BUDGET_RETRY_MS + WAIT_MS);
      });
    } finally {
      home.remove();
    }
  });

  it('shows an agent started after the workspace was opened', { timeout: 90_000 }, async () => {
    const home = new AgentHome();
    try {
      await withEditor(home, { serverArgs: ['--standalone'] }, async (recorded) => {
        // No agent yet: the idle state, and Show Budget says so.
        const misses = () => recorded.output.filter((line) => /^SOBA: budget: .*no active session/.test(line)).length;
        await waitFor(() => misses() > 0);
        // A retry passes, still finding nothing: the output said why once, not at every retry.
        await new Promise((r) => setTimeout(r, BUDGET_RETRY_MS + 1_000));
        assert.equal(misses(), 1, recorded.output.join('\n'));
        await recorded.handlers.get('soba.showBudget')!();
        assert.match(recorded.errors[0] ?? '', /^SOBA: .*no active session/);
        assert.equal(recorded.status.text, IDLE_TEXT);

        const agent = new ClaudeSession(home.transcript('b7710c'), home.workspace);
        agent.prompt('hello', 1_500);
        await showing(recorded, barText(home.importedBudget(agent.file)), 'the new agent\'s budget', BUDGET_RETRY_MS + WAIT_MS);
      });
    } finally {
      home.remove();
    }
  });

  it('shows a transcript attached before its first response as the agent sees itself, then its own compaction', { timeout: 120_000 }, async () => {
    const home = new AgentHome();
    try {
      const agent = new ClaudeSession(home.transcript('5e11ab'), home.workspace);
      agent.ask('list the files');
      await withEditor(home, { serverArgs: ['--standalone'] }, async (recorded) => {
        // Before the first response: no model, so no limits, and none of another model's.
        await waitFor(() => recorded.status.visible && / · model not known yet$/.test(recorded.status.text));
        assert.match(recorded.status.tooltip, /model not known yet: Claude Code's first response names it/);
        assert.doesNotMatch(recorded.status.tooltip, /gpt-4o/, recorded.status.tooltip);
        assert.equal(recorded.status.background, undefined);

        // The response names the model: the bar measures against where Claude Code compacts,
        // past SOBA's hard limit and still healthy.
        agent.answer('list the files', 150_000);
        const answered = home.importedBudget(agent.file);
        assert.ok(answered.effectiveTokens > answered.hardLimit, `${answered.effectiveTokens} / ${answered.hardLimit}`);
        await showing(recorded, barText(answered), 'the budget against Claude Code\'s own threshold');
        assert.equal(recorded.status.background, undefined, 'no red for a healthy agent under its own threshold');
        assert.match(recorded.status.tooltip, /Claude Code compacts at ~167\.0k \(claude-sonnet-4-5\); SOBA's hard limit /);
        assert.match(recorded.status.tooltip, /Last compaction: none yet/);

        // Claude Code compacts itself: its compaction is the last one, in the tooltip and the sidebar.
        agent.compact(150_000, 'The file listing is done.');
        agent.prompt('now fix the failing test', 21_000);
        await waitFor(() => /Last compaction: Claude Code's own \(auto\): 150k → summary /.test(recorded.status.tooltip));
        await waitFor(() =>
          recorded.views
            .get('soba.budget')!
            .getChildren()
            .some((n) => n.label === 'Last compaction' && /^Claude Code's own \(auto\)/.test(n.description ?? '')),
        );
      });
    } finally {
      home.remove();
    }
  });

  it('shows a real Claude Code session\'s budget as its transcript grows', { timeout: 120_000 }, async (t: TestContext) => {
    const fixture = path.join(SHARED_TRANSCRIPTS, 'claude-code', 'agentcmd-session-four.jsonl');
    if (!fs.existsSync(fixture)) {
      assert.notEqual(process.env.CI, 'true', `${fixture} is missing; CI must provide ../shared/fixtures beside the checkout`);
      t.skip(`SKIPPED: ../shared/fixtures missing (${fixture} not found)`);
      return;
    }
    const home = new AgentHome();
    try {
      const lines = fs.readFileSync(fixture, 'utf8').split(/(?<=\n)/);
      const half = Math.floor(lines.length / 2);
      const transcript = home.transcript('2d984148-cddb-4605-aac1-13e720fe613c');
      fs.writeFileSync(transcript, lines.slice(0, half).join(''));
      await withEditor(home, { serverArgs: ['--standalone'] }, async (recorded) => {
        const first = home.importedBudget(transcript);
        await showing(recorded, barText(first), 'the first half\'s budget');
        fs.appendFileSync(transcript, lines.slice(half).join(''));
        const whole = home.importedBudget(transcript);
        assert.ok(whole.effectiveTokens > first.effectiveTokens, `${first.effectiveTokens} → ${whole.effectiveTokens}`);
        await showing(recorded, barText(whole), 'the whole session\'s budget');
        assert.ok(recorded.status.tooltip.includes('Measured: provider usage'), recorded.status.tooltip);
      });
    } finally {
      home.remove();
    }
  });
});

// Keeps the helper honest: the records it writes are what Claude Code writes.
describe('the test agent\'s transcript', () => {
  it('imports as Claude Code with every tool call matched', () => {
    const home = new AgentHome();
    try {
      const agent = new ClaudeSession(home.transcript('c0ffee'), home.workspace);
      agent.prompt('one', 1_000);
      agent.toolCall('ls', 1_100, 200);
      appendRecords(agent.file, [{ type: 'file-history-snapshot', messageId: 'x', snapshot: {} }]);
      const budget = home.importedBudget(agent.file);
      assert.equal(budget.source, 'provider_usage');
      assert.ok(budget.effectiveTokens > 1_120, String(budget.effectiveTokens));
    } finally {
      home.remove();
    }
  });
});
