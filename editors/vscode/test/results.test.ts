// What a compaction leaves behind, against the real daemon: the session's summarization model
// answers every request with HTTP 500, so each compaction falls back to the local capsule. One
// notification says so and why in a few words; the sidebar shows its quality; the SOBA output
// has one line for each compaction, skip and failure. Before the agent opens its session the
// status bar says the extension is connected and waits for one.

import assert from 'node:assert/strict';
import * as fs from 'node:fs';
import * as http from 'node:http';
import type { AddressInfo } from 'node:net';
import { describe, it } from 'node:test';
import { formatTokens, IDLE_TEXT } from '../src/status';
import { Daemon, prose, SOFT_LIMIT } from './daemon';
import { activate } from './host';

/** A summarization model that fails every request. */
class FailingModel {
  requests = 0;
  private readonly server = http.createServer((req, res) => {
    this.requests++;
    req.resume();
    res.writeHead(500, { 'content-type': 'application/json' });
    res.end(JSON.stringify({ error: { message: 'the model is down' } }));
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

describe('compaction results', () => {
  it('shows the idle state, then a fallback once with why, its quality in the sidebar, and every outcome in the output', { timeout: 120_000 }, async () => {
    const model = new FailingModel();
    const baseUrl = await model.listen();
    const agent = new Daemon();
    fs.writeFileSync(agent.env.SOBA_CONFIG, JSON.stringify({ summarizer: { provider: 'openai', baseUrl, model: 'always-fails' } }));
    agent.start(['serve']);
    const saved = { ...process.env };
    Object.assign(process.env, agent.env);
    try {
      await agent.initialize();
      await activate({ serverPath: agent.binary }, [agent.workspace], async (recorded) => {
        assert.deepEqual(recorded.errors, [], 'the editor connected');
        // No agent session yet: the bar says the extension works, and how a session appears.
        await agent.until('the idle state', () => recorded.status.visible && recorded.status.text === IDLE_TEXT);
        assert.match(recorded.status.tooltip, /^SOBA is connected: no agent session in this workspace yet\./);

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
        await agent.until('the status bar to show the session', () => recorded.status.text.endsWith(`${formatTokens(effective)} / 7k`));

        // The editor's own compaction: the model fails, the local capsule stands in.
        await recorded.handlers.get('soba.compact')!();
        assert.ok(model.requests >= 1, 'the summarization model was asked');
        const output = (pattern: RegExp) => recorded.output.filter((line) => pattern.test(line));
        const warning = /^SOBA: daemon: The compaction used the local capsule: the summarization model answered HTTP 500/;
        await agent.until("the daemon's fallback warning", () => output(warning).length === 1);
        const results = recorded.infos.filter((m) => m.includes(' compact'));
        assert.equal(results.length, 1, `one notification: ${JSON.stringify(recorded.infos)}`);
        assert.match(results[0], /^warning: user compact, degraded \(model answered HTTP 500\): .* tokens \(−\d+%\), ck_/);
        assert.ok(!recorded.infos.some((m) => m.includes('The compaction used the local capsule')), JSON.stringify(recorded.infos));
        assert.equal(
          output(/^SOBA: compaction: \S+ user completed: .* tokens, degraded \(fallback\), ck_\S+, \d+ ms: the summarization model answered HTTP 500.*; the local capsule was used/).length,
          1,
          JSON.stringify(recorded.output),
        );
        const degradedNode = () =>
          recorded.views.get('soba.compactions')!.getChildren().find((n) => n.label === 'degraded · user') as
            | { description?: string; tooltip?: string }
            | undefined;
        await agent.until('the sidebar to show the degraded compaction', () => degradedNode() !== undefined);
        assert.match(degradedNode()!.description!, /^−\d+% \(.* → .*\) · model answered HTTP 500$/);
        assert.match(degradedNode()!.tooltip!, /Quality: degraded \(model answered HTTP 500: .*\)\n.*HTTP 500/);

        // A second compaction right away has nothing to compact: a skip, which sends no
        // notification; the output has it from the flight records.
        await recorded.handlers.get('soba.compact')!();
        const skipped = recorded.infos.filter((m) => m.startsWith('user compact skipped: '));
        assert.equal(skipped.length, 1, JSON.stringify(recorded.infos));
        const reason = skipped[0].slice('user compact skipped: '.length);
        await agent.until('the skip in the output', () => output(/^SOBA: compaction: \S+ user skipped: /).length === 1);
        assert.ok(output(/^SOBA: compaction: \S+ user skipped: /)[0].endsWith(`: ${reason}`), JSON.stringify(recorded.output));
        assert.deepEqual(recorded.errors, []);
      });
    } finally {
      process.env = saved;
      await agent.stop();
      await model.close();
    }
  });
});
