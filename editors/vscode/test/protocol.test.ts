// Drives the real daemon (`soba serve --standalone`) over vscode-jsonrpc, the way the extension's
// language client does, and checks what the status bar would show after appends and a compaction.

import assert from 'node:assert/strict';
import * as fs from 'node:fs';
import * as path from 'node:path';
import { after, before, describe, it } from 'node:test';
import { formatTokens, severity, statusBarText, statusText, tooltipLines } from '../src/status';
import { Daemon, HARD_LIMIT, prose, SOBA_BIN, SOFT_LIMIT } from './daemon';

describe('status bar against the real daemon', { timeout: 120_000 }, () => {
  const daemon = new Daemon();
  let sessionId = '';

  before(async () => {
    assert.ok(fs.existsSync(SOBA_BIN), `no daemon binary at ${SOBA_BIN}: run cargo build --bin soba or set SOBA_BIN`);
    daemon.start();
    await daemon.initialize();
  });

  after(() => daemon.stop());

  it('opens a session with the model window given and shows its empty budget', async () => {
    const opened = await daemon.request('soba/session/open', {
      workspace: daemon.workspace,
      create: true,
      model: { contextWindow: 8_000, maxOutputTokens: 1_000 },
    });
    sessionId = opened.sessionId;
    assert.equal(opened.budget.hardLimit, HARD_LIMIT);
    assert.equal(opened.budget.softLimit, SOFT_LIMIT);

    // What the extension does at start: ask for the workspace's active session.
    const report = await daemon.request('soba/budget', { workspace: daemon.workspace });
    assert.equal(report.sessionId, sessionId);
    assert.equal(daemon.tracker.accept(report), true);
    assert.ok(report.effectiveTokens < 1_000, `an empty session costs ${report.effectiveTokens} tokens`);
    assert.equal(statusText(report), `${formatTokens(report.effectiveTokens)} / 7k`);
    assert.equal(severity(report), 'normal');
  });

  it('follows appends through soba/budgetChanged', async () => {
    const before = daemon.tracker.report!.effectiveTokens;
    const appended = await daemon.request('soba/session/append', {
      sessionId,
      entries: [
        { type: 'message', role: 'user', content: [{ type: 'text', text: prose(1, 600) }] },
        { type: 'message', role: 'assistant', content: [{ type: 'text', text: prose(2, 600) }] },
      ],
    });
    assert.equal(appended.entryIds.length, 2);
    assert.ok(appended.budget.effectiveTokens > before + 1_000, `${before} → ${appended.budget.effectiveTokens}`);
    await daemon.until('a budgetChanged notification matching the append', () => daemon.tracker.report?.effectiveTokens === appended.budget.effectiveTokens);
    const shown = daemon.tracker.report!;
    assert.equal(shown.sessionId, sessionId);
    assert.equal(statusText(shown), `${formatTokens(appended.budget.effectiveTokens)} / 7k`);
    assert.notEqual(statusText(shown), `${formatTokens(before)} / 7k`);
    assert.equal(severity(shown), 'normal');
  });

  it('turns the status bar to warning past the soft limit', async () => {
    let effective = daemon.tracker.report!.effectiveTokens;
    for (let i = 3; effective <= SOFT_LIMIT; i++) {
      assert.ok(i < 60, 'appends never got past the soft limit');
      const role = i % 2 ? 'user' : 'assistant';
      const { budget } = await daemon.request('soba/session/append', {
        sessionId,
        entries: [{ type: 'message', role, content: [{ type: 'text', text: prose(i, 250) }] }],
      });
      effective = budget.effectiveTokens;
    }
    assert.ok(effective < HARD_LIMIT, `one small append jumped past the hard limit: ${effective}`);
    await daemon.until('the budget past the soft limit', () => daemon.tracker.report?.effectiveTokens === effective);
    const shown = daemon.tracker.report!;
    assert.equal(severity(shown), 'warning');
    assert.equal(statusBarText(shown), `$(warning) ${formatTokens(effective)} / 7k`);
  });

  it('shows auto-compact off in the tooltip after soba/autoCompact', async () => {
    const { autoCompact } = await daemon.request('soba/autoCompact', { workspace: daemon.workspace, enabled: false });
    assert.equal(autoCompact, false);
    await daemon.until('a budgetChanged with auto-compact off', () => daemon.tracker.report?.autoCompact === false);
    assert.ok(tooltipLines(daemon.tracker.report!, new Date()).some((line) => line.startsWith('Auto-compact: off')));
  });

  it('compacts with progress notifications and shows the smaller budget afterwards', async () => {
    const beforeTokens = daemon.tracker.report!.effectiveTokens;
    const result = await daemon.request('soba/compact', { workspace: daemon.workspace, instructions: 'keep the parser decisions' });
    assert.equal(result.outcome, 'completed', `compaction ${result.outcome}: ${result.reason}`);
    assert.ok(result.checkpointId, 'a completed compaction names its checkpoint');
    assert.ok(result.tokensAfter < result.tokensBefore, `${result.tokensBefore} → ${result.tokensAfter}`);

    await daemon.until('the compaction end notification', () =>
      daemon.compactions.some((e) => e.phase === 'end' && e.operationId === result.operationId),
    );
    const phases = daemon.compactions.filter((e) => e.operationId === result.operationId).map((e) => e.phase);
    assert.equal(phases[0], 'start');
    assert.equal(phases[phases.length - 1], 'end');
    const end = daemon.compactions.find((e) => e.phase === 'end' && e.operationId === result.operationId)!;
    assert.ok(end.message && end.message.includes(result.checkpointId!), `completion line: ${end.message}`);

    await daemon.until('a budgetChanged naming the new checkpoint', () => daemon.tracker.report?.lastCompaction?.checkpointId === result.checkpointId);
    const shown = daemon.tracker.report!;
    assert.ok(shown.effectiveTokens < beforeTokens, `${beforeTokens} → ${shown.effectiveTokens}`);
    assert.equal(statusText(shown), `${formatTokens(shown.effectiveTokens)} / 7k`);
    assert.equal(severity(shown), 'normal');
    assert.equal(shown.compacting, false);
    const lastLine = tooltipLines(shown, new Date()).find((l) => l.startsWith('Last compaction: '))!;
    assert.ok(lastLine.startsWith(`Last compaction: ${result.trigger}: `), lastLine);
    assert.ok(lastLine.includes(result.checkpointId!), lastLine);
    if (result.fallback) {
      assert.ok(daemon.messages.some((m) => m.type === 2), 'a degraded fallback is announced with a warning');
    }
    // The Recent Compactions view reads the flight records.
    const { records } = await daemon.request('soba/flight', { workspace: daemon.workspace, limit: 10 });
    const record = records.find((r) => r.operationId === result.operationId);
    assert.ok(record, JSON.stringify(records));
    assert.equal(record.outcome, 'completed');
    assert.equal(record.trigger, result.trigger);
  });

  it('lists the workspace sessions for the sidebar with the active one marked', async () => {
    const { sessions } = await daemon.request('soba/sessions', { workspace: daemon.workspace });
    assert.deepEqual(sessions.filter((s) => s.active).map((s) => s.sessionId), [sessionId]);
    const active = sessions.find((s) => s.active)!;
    assert.equal(active.effectiveTokens, daemon.tracker.report!.effectiveTokens);
    assert.equal(active.hardLimit, HARD_LIMIT);
  });

  it('creates, lists, exports and loads a capsule', async () => {
    const created = await daemon.request('soba/capsule/create', { workspace: daemon.workspace, title: 'Parser hand-off' });
    const { capsules } = await daemon.request('soba/capsule/list', { workspace: daemon.workspace });
    assert.ok(capsules.some((c) => c.checkpointId === created.checkpointId && c.title === 'Parser hand-off'));

    const file = path.join(daemon.tmp, 'parser-hand-off.capsule.md');
    const exported = await daemon.request('soba/capsule/export', { workspace: daemon.workspace, checkpointId: created.checkpointId, path: file });
    assert.ok(fs.statSync(exported.path).size > 0);
    const loaded = await daemon.request('soba/capsule/load', { workspace: daemon.workspace, path: file });
    assert.equal(loaded.sessionId, sessionId);
    const after = await daemon.request('soba/capsule/list', { workspace: daemon.workspace });
    assert.ok(after.capsules.some((c) => c.checkpointId === loaded.checkpointId && c.origin === 'loaded'));
  });

  it('answers a bad request with invalid params naming the field', async () => {
    await assert.rejects(
      daemon.request('soba/autoCompact', { workspace: daemon.workspace } as never),
      (err: { code: number; message: string }) => {
        assert.equal(err.code, -32602, err.message);
        assert.match(err.message, /enabled/);
        return true;
      },
    );
  });

  it('lets go of the session when its agent closes it', async () => {
    assert.equal(daemon.tracker.report?.sessionId, sessionId);
    const closed = await daemon.request('soba/session/close', { sessionId });
    assert.equal(closed.sessionId, sessionId);
    await daemon.until('soba/session/closed', () => daemon.closed.some((c) => c.sessionId === sessionId));
    assert.equal(daemon.closed[0].workspace, daemon.workspace);
    assert.equal(daemon.tracker.report, undefined, 'the status bar hides');
    // What the extension asks next: the workspace has no active session any more.
    await assert.rejects(daemon.request('soba/budget', { workspace: daemon.workspace }), (err: { code: number }) => {
      assert.equal(err.code, -32002);
      return true;
    });
    const sessions = await daemon.request('soba/sessions', { workspace: daemon.workspace });
    assert.deepEqual(sessions.sessions, []);
  });
});
