// Stopping a compaction mid-model-call, against the real daemon: the session's summarizer is a
// loopback server that takes the request and never answers, so the compaction waits on the
// model until the user cancels it, from the progress notification or with SOBA: Cancel
// Compaction (for a compaction the agent started itself).

import assert from 'node:assert/strict';
import * as fs from 'node:fs';
import * as http from 'node:http';
import type { AddressInfo } from 'node:net';
import { describe, it } from 'node:test';
import type { CompactionResult } from '../src/protocol';
import { formatTokens } from '../src/status';
import { Daemon, prose, SOFT_LIMIT } from './daemon';
import { activate } from './host';

/** A summarization model that reads each request and never replies. */
class SilentModel {
  requests = 0;
  private readonly server = http.createServer((req) => {
    this.requests++;
    req.resume();
  });

  async listen(): Promise<string> {
    await new Promise<void>((resolve) => this.server.listen(0, '127.0.0.1', resolve));
    return `http://127.0.0.1:${(this.server.address() as AddressInfo).port}/v1`;
  }

  async close(): Promise<void> {
    this.server.closeAllConnections();
    await new Promise((resolve) => this.server.close(resolve));
  }
}

const CANCELLED_LINE = /^\w+ compact cancelled: no capsule written; the context is unchanged$/;

describe('cancelling a compaction', () => {
  it('stops the editor\'s and the agent\'s compaction mid-model-call, and says when none runs', { timeout: 120_000 }, async () => {
    const model = new SilentModel();
    const baseUrl = await model.listen();
    const agent = new Daemon();
    // The user's config (trusted): a model summarizer, given long enough that only a cancel ends its call.
    fs.writeFileSync(
      agent.env.SOBA_CONFIG,
      JSON.stringify({ summarizer: { provider: 'openai', baseUrl, model: 'never-answers' }, compaction: { timeoutMs: 60_000 } }),
    );
    agent.start(['serve']);
    const saved = { ...process.env };
    Object.assign(process.env, agent.env);
    try {
      await agent.initialize();
      const opened = await agent.request('soba/session/open', {
        workspace: agent.workspace,
        create: true,
        model: { contextWindow: 8_000, maxOutputTokens: 1_000 },
      });
      const sessionId = opened.sessionId;
      await agent.request('soba/autoCompact', { sessionId, enabled: false });
      let effective = opened.budget.effectiveTokens;
      for (let i = 1; effective <= SOFT_LIMIT; i++) {
        assert.ok(i < 80, 'appends never got past the soft limit');
        const { budget } = await agent.request('soba/session/append', {
          sessionId,
          entries: [{ type: 'message', role: i % 2 ? 'user' : 'assistant', content: [{ type: 'text', text: prose(i, 300) }] }],
        });
        effective = budget.effectiveTokens;
      }

      await activate({ serverPath: agent.binary }, [agent.workspace], async (recorded) => {
        assert.deepEqual(recorded.errors, [], 'the editor connected');
        await agent.until('the status bar to show the session', () => recorded.status.text.endsWith(`${formatTokens(effective)} / 7k`));
        const cancelledLines = () => recorded.infos.filter((m) => CANCELLED_LINE.test(m));

        // The editor's own compaction, cancelled from its progress notification.
        const compacting = recorded.handlers.get('soba.compact')!();
        await agent.until('the summarization model to be asked', () => model.requests === 1 && recorded.progress.length === 1);
        const progress = recorded.progress[0];
        assert.ok(progress.cancellable, 'the progress offers Cancel');
        assert.equal(recorded.contexts.get('soba.compacting'), true, 'Cancel Compaction is offered while it runs');
        progress.cancel();
        await compacting;
        await agent.until('the progress to close', () => progress.done);
        await agent.until('the end of the compaction', () => agent.compactions.some((c) => c.phase === 'end'));
        const first = agent.compactions.find((c) => c.phase === 'end')!.result as CompactionResult;
        assert.equal(first.outcome, 'cancelled', JSON.stringify(first));
        assert.equal(first.checkpointId, null);
        assert.deepEqual(recorded.errors, []);
        assert.equal(cancelledLines().length, 1, `the cancelled outcome is shown once: ${JSON.stringify(recorded.infos)}`);
        assert.ok(!recorded.infos.some((m) => m.startsWith('warning:')), `not as a warning: ${JSON.stringify(recorded.infos)}`);

        // The agent's own compaction, seen through notifications, cancelled from the palette.
        const agentCompact = agent.request('soba/compact', { sessionId });
        await agent.until('the model to be asked again', () => model.requests === 2 && recorded.progress.length === 2);
        await recorded.handlers.get('soba.cancelCompaction')!();
        const second = await agent.orExit(agentCompact);
        assert.equal(second.outcome, 'cancelled', JSON.stringify(second));
        await agent.until('the second progress to close', () => recorded.progress[1].done);
        assert.equal(cancelledLines().length, 2, JSON.stringify(recorded.infos));
        // The budget that says the compaction is over may come after its end.
        await agent.until('Cancel Compaction no longer offered', () => recorded.contexts.get('soba.compacting') === false);

        // Neither cancelled compaction wrote a capsule.
        const { capsules } = await agent.request('soba/capsule/list', { sessionId });
        assert.deepEqual(capsules, []);

        // Nothing runs: the command says so.
        await recorded.handlers.get('soba.cancelCompaction')!();
        assert.ok(
          recorded.infos.includes(`No compaction is running in session ${sessionId}: there is nothing to cancel.`),
          JSON.stringify(recorded.infos),
        );
        assert.deepEqual(recorded.errors, []);
      });
    } finally {
      process.env = saved;
      await agent.stop();
      await model.close();
    }
  });
});
