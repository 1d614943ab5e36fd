import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { capsuleFileName, checkpointItem, commandHandlers, type CommandContext, type EditorUi, type PickItem } from '../src/commands';
import type { BudgetReport, CapsuleSummary, ContextResult, ParamsOf, RequestMethod, ResultOf, SobaRequester } from '../src/protocol';
import { readSettings } from '../src/settings';
import { CompactionProgress } from '../src/status';
import { drivenControl, followedControl, preview, report, result } from './fixtures';

type Reply = { [M in RequestMethod]?: (params: ParamsOf<M>) => ResultOf<M> };

/** Records what the commands ask of the editor and the daemon; answers from scripted replies. */
class Harness {
  readonly sent: Array<[string, unknown]> = [];
  readonly shown: Array<[string, string]> = [];
  inputs: Array<string | undefined> = [];
  picks: number[] = [];
  saveAs: string | undefined = '/tmp/out.capsule.md';
  openPath: string | undefined = '/tmp/in.capsule.md';
  infoChoice: string | undefined;
  /** Answers to confirmation questions, in order; a missing answer is "cancel". */
  confirms: boolean[] = [];
  refreshed = 0;
  running = true;
  /** What the status bar shows. */
  budget: BudgetReport | undefined;
  /** Pickers offered, each as its items. */
  readonly offered: Array<Array<PickItem<unknown>>> = [];
  readonly progress = new CompactionProgress();

  constructor(private readonly replies: Reply) {}

  readonly client: SobaRequester = {
    request: async <M extends RequestMethod>(method: M, params: ParamsOf<M>): Promise<ResultOf<M>> => {
      this.sent.push([method, params]);
      const reply = this.replies[method] as ((p: ParamsOf<M>) => ResultOf<M>) | undefined;
      if (!reply) throw new Error(`unknown session (no reply scripted for ${method})`);
      return reply(params);
    },
  };

  readonly ui: EditorUi = {
    info: async (message) => {
      this.shown.push(['info', message]);
      return this.infoChoice;
    },
    warn: (message) => void this.shown.push(['warn', message]),
    error: (message) => void this.shown.push(['error', message]),
    input: async () => this.inputs.shift(),
    pick: async <T>(items: PickItem<T>[]) => {
      this.offered.push(items as Array<PickItem<unknown>>);
      const index = this.picks.shift();
      return index === undefined ? undefined : items[index].value;
    },
    saveFile: async () => this.saveAs,
    openCapsuleFile: async () => this.openPath,
    showLines: (lines) => void this.shown.push(['lines', lines.join('\n')]),
    showDocument: (name, content) => void this.shown.push([`document:${name}`, content]),
    confirm: async (message, _detail, action) => {
      this.shown.push(['confirm', `${message} [${action}]`]);
      return this.confirms.shift() ?? false;
    },
  };

  get ctx(): CommandContext {
    return {
      ui: this.ui,
      client: () => (this.running ? this.client : undefined),
      target: () => ({ workspace: '/w' }),
      settings: () => readSettings((key) => (key === 'compact.mirror' ? true : key === 'flightRecords.limit' ? 7 : undefined)),
      progress: this.progress,
      refresh: () => void this.refreshed++,
      shownBudget: () => this.budget,
    };
  }

  run(id: keyof ReturnType<typeof commandHandlers>, arg?: unknown) {
    return commandHandlers(this.ctx)[id](arg);
  }
}

const contextResult = (overrides: Partial<ContextResult> = {}): ContextResult => ({
  sessionId: 's_1',
  workspace: '/w',
  effectiveTokens: 31_200,
  hardLimit: 48_800,
  softLimit: 39_040,
  control: drivenControl,
  source: 'estimated',
  tokens: 31_200,
  breakdown: { system: 1_200, tools: 2_000, capsule: 900, retainedTail: 0, newEntries: 27_100 },
  budgetBreakdown: {
    system: 1_200,
    tools: 2_000,
    capsule: 900,
    retainedTail: 0,
    newEntries: 27_100,
    notInLog: 0,
    counted: { system: 1_200, tools: 2_000, capsule: 900, retainedTail: 0, newEntries: 27_100 },
    unseen: { tokens: 0, kind: 'none', source: 'none', learnedFrom: 0 },
  },
  byKind: { system: 1_200, toolSchemas: 2_000, capsule: 900, userMessages: 4_000, assistantMessages: 6_000, fileReads: 12_400, toolOutputs: 4_700 },
  largest: [
    { entryId: 'e_3', kind: 'file', label: 'Read src/parser.rs', path: 'src/parser.rs', tokens: 12_400, part: 'new', elided: false },
    { entryId: 'e_5', kind: 'tool_output', label: 'Bash cargo test | tail', tokens: 4_700, part: 'new', elided: true },
  ],
  capsule: { checkpointId: 'ck_1', entryId: 'e_1', title: 'Parser', trigger: 'user', quality: 'model', tokens: 900, text: '## Goal\nFix the parser.' },
  ...overrides,
});

const capsule = (id: string, title: string): CapsuleSummary => ({
  checkpointId: id,
  entryId: `e_${id}`,
  title,
  trigger: 'user',
  quality: 'model',
  ts: '2026-11-29T12:00:00Z',
  tokens: { before: 9000, after: 900, capsule: 700 },
  origin: 'session',
});

describe('commands', () => {
  it('compacts with the typed instructions and shows the result the daemon did not announce', async () => {
    const h = new Harness({ 'soba/compact': () => result() });
    h.inputs = ['  keep the failing test  '];
    await h.run('soba.compact');
    assert.deepEqual(h.sent, [['soba/compact', { workspace: '/w', instructions: 'keep the failing test', mirror: true }]]);
    assert.deepEqual(h.shown, [['info', 'user compact: 41.2k → 18.3k tokens (−56%), model, ck_3f9a']]);
    assert.equal(h.refreshed, 1);
  });

  it('does not repeat a completion line the daemon already announced, and omits empty instructions', async () => {
    const h = new Harness({ 'soba/compact': () => result() });
    h.progress.handle({ sessionId: 's', operationId: 'op_1', phase: 'end', trigger: 'user', message: 'done' });
    h.inputs = [''];
    await h.run('soba.compact');
    assert.deepEqual(h.sent, [['soba/compact', { workspace: '/w', mirror: true }]]);
    assert.deepEqual(h.shown, []);
  });

  it('does nothing when the instructions box is dismissed', async () => {
    const h = new Harness({});
    h.inputs = [undefined];
    await h.run('soba.compact');
    assert.deepEqual(h.sent, []);
  });

  it('warns on a degraded compaction and errors on a failed one', async () => {
    const degraded = new Harness({ 'soba/compact': () => result({ fallback: true, quality: 'degraded' }) });
    degraded.inputs = [''];
    await degraded.run('soba.compact');
    assert.equal(degraded.shown[0][0], 'warn');
    const failed = new Harness({ 'soba/compact': () => result({ outcome: 'failed', reason: 'summarizer timed out' }) });
    failed.inputs = [''];
    await failed.run('soba.compact');
    assert.deepEqual(failed.shown, [['error', 'user compact failed: summarizer timed out']]);
  });

  it('cancels the compaction the notifications show running, in its own session', async () => {
    const h = new Harness({ 'soba/cancel': () => ({ cancelled: true }) });
    h.budget = report({ sessionId: 's_shown' });
    h.progress.handle({ sessionId: 's_agent', operationId: 'op_7', phase: 'start', trigger: 'auto_threshold' });
    await h.run('soba.cancelCompaction');
    assert.deepEqual(h.sent, [['soba/cancel', { sessionId: 's_agent' }]]);
    // The compaction's end notification says how it ended.
    assert.deepEqual(h.shown, []);
  });

  it('says so when no compaction runs in the active session', async () => {
    const h = new Harness({ 'soba/budget': () => report({ sessionId: 's_1' }), 'soba/cancel': () => ({ cancelled: false }) });
    await h.run('soba.cancelCompaction');
    assert.deepEqual(h.sent, [
      ['soba/budget', { workspace: '/w' }],
      ['soba/cancel', { sessionId: 's_1' }],
    ]);
    assert.deepEqual(h.shown, [['info', 'No compaction is running in session s_1: there is nothing to cancel.']]);
  });

  it('shows a compaction cancelled while queued as cancelled, not as a failure', async () => {
    const h = new Harness({
      'soba/compact': () => result({ outcome: 'cancelled', reason: 'cancelled', checkpointId: null, quality: null }),
    });
    h.inputs = [''];
    await h.run('soba.compact');
    assert.deepEqual(h.shown, [['info', 'user compact cancelled: no capsule written; the context is unchanged']]);
  });

  it('shows the budget and compacts when asked from the message', async () => {
    const h = new Harness({ 'soba/budget': () => report(), 'soba/compact': () => result() });
    h.infoChoice = 'Compact Now';
    h.inputs = [''];
    await h.run('soba.showBudget');
    assert.deepEqual(
      h.sent.map(([m]) => m),
      ['soba/budget', 'soba/compact'],
    );
    assert.match(h.shown[0][1], /^Context budget: 31.2k \/ 48.8k tokens/);
  });

  it('turns auto-compact on and off', async () => {
    const h = new Harness({ 'soba/autoCompact': (p) => ({ autoCompact: p.enabled }) });
    await h.run('soba.autoCompactOff');
    await h.run('soba.autoCompactOn');
    assert.deepEqual(h.sent, [
      ['soba/autoCompact', { workspace: '/w', enabled: false }],
      ['soba/autoCompact', { workspace: '/w', enabled: true }],
    ]);
    assert.deepEqual(
      h.shown.map(([, m]) => m),
      ['Auto-compact is off for the active session.', 'Auto-compact is on for the active session.'],
    );
  });

  it('creates a capsule with a title, and not without one', async () => {
    const h = new Harness({ 'soba/capsule/create': (p) => ({ checkpointId: 'ck_9', title: p.title, tokens: 1500, sessionTokens: 31_200 }) });
    h.inputs = ['  ', 'Hand-off'];
    await h.run('soba.createCapsule');
    assert.deepEqual(h.sent, []);
    await h.run('soba.createCapsule');
    assert.deepEqual(h.sent, [['soba/capsule/create', { workspace: '/w', title: 'Hand-off' }]]);
    assert.deepEqual(h.shown, [
      ['info', 'Capsule "Hand-off" created: ck_9 (1.5k tokens). It compacts nothing: the context stays as it was; export it to hand it off.'],
    ]);
  });

  it('exports a checkpoint picked from the list, newest first, to the chosen file', async () => {
    const h = new Harness({
      'soba/capsule/list': () => ({ capsules: [capsule('ck_1', 'First'), capsule('ck_2', 'Second')] }),
      'soba/capsule/export': (p) => ({ path: p.path }),
    });
    h.picks = [1];
    await h.run('soba.exportCapsule');
    assert.deepEqual(h.sent[1], ['soba/capsule/export', { workspace: '/w', checkpointId: 'ck_1', path: '/tmp/out.capsule.md' }]);
    assert.deepEqual(h.shown, [['info', 'Capsule ck_1 exported to /tmp/out.capsule.md.']]);
  });

  it('exports the capsule a sidebar item stands for without asking which', async () => {
    const h = new Harness({ 'soba/capsule/export': (p) => ({ path: p.path }) });
    await h.run('soba.exportCapsule', { checkpointId: 'ck_5', label: 'From view' });
    assert.deepEqual(h.sent, [['soba/capsule/export', { workspace: '/w', checkpointId: 'ck_5', path: '/tmp/out.capsule.md' }]]);
  });

  it('says there is nothing to export in a session without checkpoints, and stops on a dismissed dialog', async () => {
    const empty = new Harness({ 'soba/capsule/list': () => ({ capsules: [] }) });
    await empty.run('soba.exportCapsule');
    assert.match(empty.shown[0][1], /no checkpoints yet/);
    const dismissed = new Harness({ 'soba/capsule/list': () => ({ capsules: [capsule('ck_1', 'x')] }) });
    dismissed.picks = [0];
    dismissed.saveAs = undefined;
    await dismissed.run('soba.exportCapsule');
    assert.deepEqual(dismissed.sent.map(([m]) => m), ['soba/capsule/list']);
  });

  it('loads a capsule file into a workspace without a live session without asking', async () => {
    const h = new Harness({ 'soba/capsule/load': () => ({ checkpointId: 'ck_l', sessionId: 's_1' }) });
    await h.run('soba.loadCapsule');
    assert.deepEqual(h.sent, [
      ['soba/budget', { workspace: '/w' }],
      ['soba/capsule/load', { workspace: '/w', path: '/tmp/in.capsule.md' }],
    ]);
    assert.deepEqual(h.shown, [['info', 'Capsule loaded into session s_1 as ck_l.']]);
    assert.equal(h.refreshed, 1);
  });

  it('asks before a capsule load replaces a live context, and loads nothing when declined', async () => {
    const live = () => report({ sessionId: 's_live', effectiveTokens: 52_900 });
    const declined = new Harness({ 'soba/budget': live, 'soba/capsule/load': () => ({ checkpointId: 'ck_l', sessionId: 's_live' }) });
    await declined.run('soba.loadCapsule');
    assert.deepEqual(declined.sent.map(([m]) => m), ['soba/budget'], 'nothing is loaded without a yes');
    assert.deepEqual(declined.shown, [['confirm', 'Replace the live context (52.9k tokens) with this capsule? [Load Capsule]']]);

    const accepted = new Harness({ 'soba/budget': live, 'soba/capsule/load': () => ({ checkpointId: 'ck_l', sessionId: 's_live' }) });
    accepted.confirms = [true];
    await accepted.run('soba.loadCapsule');
    assert.deepEqual(accepted.sent.map(([m]) => m), ['soba/budget', 'soba/capsule/load']);
    assert.equal(accepted.shown.at(-1)?.[1], 'Capsule loaded into session s_live as ck_l.');
  });

  it('rewinds the active session to a picked checkpoint after confirming', async () => {
    const h = new Harness({
      'soba/budget': () => report({ sessionId: 's_1', effectiveTokens: 40_000 }),
      'soba/capsule/list': () => ({ capsules: [capsule('ck_1', 'First'), capsule('ck_2', 'Second')] }),
      'soba/rewind': () => ({ leafId: 'e_ck_1', budget: report({ effectiveTokens: 900, hardLimit: 48_800 }) }),
    });
    h.picks = [1]; // newest first: index 1 is ck_1
    h.confirms = [true];
    await h.run('soba.rewind');
    assert.deepEqual(h.sent.at(-1), ['soba/rewind', { sessionId: 's_1', entryId: 'e_ck_1' }]);
    assert.deepEqual(h.sent[1], ['soba/capsule/list', { sessionId: 's_1' }], 'the list is the shown session\'s');
    assert.equal(h.shown.at(-1)?.[1], 'Rewound to ck_1: 900 / 48.8k tokens.');
    assert.equal(h.refreshed, 1);
  });

  it('does not rewind when the confirmation is declined or there is no checkpoint', async () => {
    const declined = new Harness({
      'soba/budget': () => report(),
      'soba/capsule/list': () => ({ capsules: [capsule('ck_1', 'First')] }),
    });
    declined.picks = [0];
    await declined.run('soba.rewind');
    assert.ok(!declined.sent.some(([m]) => m === 'soba/rewind'));
    const none = new Harness({ 'soba/budget': () => report(), 'soba/capsule/list': () => ({ capsules: [] }) });
    await none.run('soba.rewind');
    assert.match(none.shown[0][1], /no checkpoints to rewind to/);
  });

  it('shows what fills the context window as a document, and the capsule in force', async () => {
    const h = new Harness({ 'soba/context': () => contextResult() });
    await h.run('soba.showContext');
    assert.deepEqual(h.sent, [['soba/context', { workspace: '/w', limit: 15 }]]);
    const [kind, doc] = h.shown[0];
    assert.equal(kind, 'document:context');
    assert.match(doc, /\*\*31\.2k \/ 48\.8k tokens\*\* \(64% of the hard limit\), 17\.6k free; auto-compaction starts past 39k/);
    assert.match(doc, /\| File reads \| 12\.4k \| 25% \|/);
    assert.match(doc, /\| 12\.4k \| file \| Read src\/parser\.rs \| new · `e_3` \|/);
    assert.match(doc, /`ck_1` “Parser”: user, model, 900 tokens/);

    await h.run('soba.viewCapsule');
    assert.equal(h.shown[1][0], 'document:capsule');
    assert.match(h.shown[1][1], /^<!-- SOBA capsule ck_1 “Parser”: user, model, 900 tokens -->\n\n## Goal/);
  });

  it("counts what is not in the log by kind too, so that the kinds add up to the total", async () => {
    const unseen = contextResult({
      effectiveTokens: 62_228,
      source: 'provider_usage',
      tokens: 7_956,
      breakdown: { system: 0, tools: 0, capsule: 2_200, retainedTail: 0, newEntries: 5_756 },
      byKind: { system: 0, toolSchemas: 0, capsule: 2_200, userMessages: 1_000, assistantMessages: 1_756, fileReads: 2_000, toolOutputs: 1_000 },
    });
    const h = new Harness({ 'soba/context': () => unseen });
    await h.run('soba.showContext');
    const byKind = h.shown[0][1].split('## By kind')[1].split('## Largest')[0];
    assert.match(byKind, /\| Not in the log \| 54\.3k \| /, byKind);
  });

  it("shows a followed agent's own compaction summary as the capsule in force", async () => {
    const h = new Harness({
      'soba/context': () =>
        contextResult({
          control: followedControl,
          capsule: null,
          agentSummary: {
            entryId: 'e_cb',
            agent: 'claude-code',
            trigger: 'auto',
            ts: '2026-12-01T10:05:00Z',
            tokens: 2_200,
            text: 'This session is being continued from a previous conversation. The parser is done.',
          },
        }),
    });
    await h.run('soba.showContext');
    assert.match(h.shown[0][1], /Claude Code's own compaction summary \(auto, `e_cb`\), 2\.2k tokens/);
    assert.doesNotMatch(h.shown[0][1], /has not been compacted/);
    await h.run('soba.viewCapsule');
    assert.equal(h.shown[1][0], 'document:capsule');
    assert.match(h.shown[1][1], /^<!-- Claude Code's own compaction summary \(auto, e_cb, 2026-12-01T10:05:00Z\): 2\.2k tokens -->\n\nThis session is being continued/);
  });

  it('previews instead of compacting a session its agent compacts, with no success message', async () => {
    const h = new Harness({ 'soba/preview': () => preview() });
    h.budget = report({ control: followedControl });
    h.inputs = [' keep the parser work '];
    await h.run('soba.compact');
    assert.deepEqual(h.sent, [['soba/preview', { workspace: '/w', action: 'compact', instructions: 'keep the parser work' }]]);
    assert.deepEqual(h.shown.map(([kind]) => kind), ['document:preview']);
    assert.match(h.shown[0][1], /^# What SOBA would send after compacting\n\n> Preview: nothing was changed/);
    assert.equal(h.refreshed, 0, 'nothing changed');
  });

  it('compacts a session SOBA drives as before', async () => {
    const h = new Harness({ 'soba/compact': () => result() });
    h.budget = report({ control: drivenControl });
    h.inputs = [''];
    await h.run('soba.compact');
    assert.deepEqual(h.sent.map(([m]) => m), ['soba/compact']);
    assert.equal(h.shown[0][0], 'info');
  });

  it('falls back to the preview when the daemon refuses a compaction the bar did not know about', async () => {
    const h = new Harness({
      'soba/compact': () => {
        throw Object.assign(new Error('soba/compact was not applied: Claude Code compacts this session itself'), { code: -32005 });
      },
      'soba/preview': () => preview(),
    });
    h.inputs = [''];
    await h.run('soba.compact');
    assert.deepEqual(h.sent.map(([m]) => m), ['soba/compact', 'soba/preview']);
    assert.deepEqual(h.shown.map(([kind]) => kind), ['document:preview']);
  });

  it('previews a capsule load and a rewind of a followed session, asking nothing and changing nothing', async () => {
    const load = new Harness({ 'soba/preview': () => preview({ action: 'capsuleLoad' }) });
    load.budget = report({ control: followedControl });
    await load.run('soba.loadCapsule');
    assert.deepEqual(load.sent, [['soba/preview', { workspace: '/w', action: 'capsuleLoad', path: '/tmp/in.capsule.md' }]]);
    assert.deepEqual(load.shown.map(([kind]) => kind), ['document:preview']);

    const rewind = new Harness({
      'soba/budget': () => report({ sessionId: 's_cc', control: followedControl }),
      'soba/capsule/list': () => ({ capsules: [capsule('ck_1', 'First')] }),
      'soba/preview': () => preview({ action: 'rewind' }),
    });
    rewind.picks = [0];
    await rewind.run('soba.rewind');
    assert.deepEqual(rewind.sent.at(-1), ['soba/preview', { sessionId: 's_cc', action: 'rewind', entryId: 'e_ck_1' }]);
    assert.ok(!rewind.sent.some(([m]) => m === 'soba/rewind'));
    assert.deepEqual(rewind.shown.map(([kind]) => kind), ['document:preview'], 'no confirmation, no success message');
  });

  it('offers a preview, not "Compact Now", from the budget of a followed session', async () => {
    const h = new Harness({ 'soba/budget': () => report({ control: followedControl }), 'soba/preview': () => preview() });
    h.budget = report({ control: followedControl });
    h.infoChoice = 'Preview Compaction';
    h.inputs = [''];
    await h.run('soba.showBudget');
    assert.match(h.shown[0][1], /estimated\. Claude Code compacts this session itself/);
    assert.doesNotMatch(h.shown[0][1], /auto-compact/, 'SOBA\'s auto-compact does not apply to a followed agent');
    assert.deepEqual(h.sent.map(([m]) => m), ['soba/budget', 'soba/preview']);
  });

  it('lists checkpoints by title or by what made them, with a relative and local time, the id only once', () => {
    const now = new Date('2026-11-29T12:30:00Z');
    const titled = checkpointItem({ ...capsule('ck_1', 'Parser'), trigger: 'handoff' }, now);
    assert.equal(titled.label, 'Parser');
    assert.match(titled.description ?? '', /^30 min ago · /);
    assert.doesNotMatch(titled.description ?? '', /2026-11-29T12:00:00Z/, 'no raw ISO time');
    assert.equal(titled.detail, 'ck_1 · Capsule · model · 700 tokens', "the capsule's own size, as the toast and the sidebar give it");
    const untitled = checkpointItem({ ...capsule('ck_2', ''), trigger: 'auto_threshold' }, now);
    assert.equal(untitled.label, 'Compaction (auto threshold)');
    const all = [untitled.label, untitled.description, untitled.detail].join(' ');
    assert.equal(all.split('ck_2').length - 1, 1, `the id once: ${all}`);
    const loaded = checkpointItem({ ...capsule('ck_3', ''), origin: 'loaded' }, now);
    assert.equal(loaded.label, 'Loaded capsule');
    assert.equal(checkpointItem({ ...capsule('ck_4', ''), trigger: 'user' }, now).label, 'Compaction (/compact)');
  });

  it('says who compacts in the context of a followed agent, not where SOBA would', async () => {
    const h = new Harness({ 'soba/context': () => contextResult({ control: followedControl }) });
    await h.run('soba.showContext');
    assert.match(h.shown[0][1], /17\.6k free; Claude Code compacts this session itself; SOBA follows it/);
    assert.doesNotMatch(h.shown[0][1], /auto-compaction starts past/);
  });

  it('lists what the provider counted beyond the log as a part, so the parts sum to the total', async () => {
    const followed = contextResult({
      source: 'provider_usage',
      effectiveTokens: 136_500,
      hardLimit: 160_000,
      breakdown: { system: 0, tools: 0, capsule: 2_200, retainedTail: 0, newEntries: 101_500 },
    });
    const h = new Harness({ 'soba/context': () => followed });
    await h.run('soba.showContext');
    const doc = h.shown[0][1];
    assert.match(doc, /\| Not in the log \| 32\.8k \| 21% \|/);
    assert.match(doc, /\| Free \| 23\.5k \|/);
  });

  it('says there is no capsule to view before the first compaction', async () => {
    const h = new Harness({ 'soba/context': () => contextResult({ capsule: null }) });
    await h.run('soba.viewCapsule');
    assert.deepEqual(h.shown, [['info', 'The active session has no capsule yet: it has not been compacted.']]);
  });

  it('shows flight records with the configured limit', async () => {
    const h = new Harness({ 'soba/flight': () => ({ records: [] }) });
    await h.run('soba.showFlightRecords');
    assert.deepEqual(h.sent, [['soba/flight', { workspace: '/w', limit: 7 }]]);
    assert.deepEqual(h.shown, [['lines', 'No flight records yet.']]);
  });

  it('turns daemon errors and a stopped daemon into one error message', async () => {
    const h = new Harness({});
    await h.run('soba.showBudget');
    assert.deepEqual(h.shown, [['error', 'SOBA: unknown session (no reply scripted for soba/budget)']]);
    h.running = false;
    await h.run('soba.showFlightRecords');
    assert.match(h.shown[1][1], /^SOBA: the SOBA daemon is not running: check the "soba.serverPath" setting/);
  });

  it('tells to update soba when the daemon does not know a request', async () => {
    const h = new Harness({});
    h.client.request = async () => {
      throw Object.assign(new Error('Method not found'), { code: -32601, data: 'soba/compact' });
    };
    h.inputs = [''];
    await h.run('soba.compact');
    assert.deepEqual(h.shown, [['error', 'SOBA: soba/compact is not supported by this soba daemon: update soba']]);
  });

  it('names capsule files after their title', () => {
    assert.equal(capsuleFileName({ title: 'Auth refactor: hand-off!', checkpointId: 'ck_1' }), 'auth-refactor-hand-off.capsule.md');
    assert.equal(capsuleFileName({ title: '', checkpointId: 'ck_1' }), 'ck_1.capsule.md');
  });
});
