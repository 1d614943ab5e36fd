// pi (the pinned npm release) compacting through this extension and the real SOBA daemon,
// against a fake model on 127.0.0.1; and pi falling back to its own compaction when SOBA
// cannot answer.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { startFakeModel, filler, messageText, PI_SUMMARY } from './fake-model.mjs';
import { makeHome, Pi, readJsonl } from './pi-harness.mjs';

const SOBA_BIN = process.env.SOBA_BIN;
const COMPACTION_PREFIX = 'The conversation history before this point was compacted into the following summary:\n\n<summary>\n';

let model;
const homes = [];
before(async () => {
  assert.ok(SOBA_BIN && fs.existsSync(SOBA_BIN), 'SOBA_BIN names the soba binary (scripts/test sets it)');
  model = await startFakeModel();
});
after(async () => {
  await model.close();
  if (!process.env.SOBA_PI_KEEP) for (const h of homes) h.remove();
});

function home(options = {}) {
  const h = makeHome({ baseUrl: model.baseUrl, sobaBin: SOBA_BIN, ...options });
  homes.push(h);
  return h;
}

/** Turns until pi compacts (its window is 16k tokens, ~3k a turn); returns the compaction_end event. */
async function talkUntilCompaction(pi) {
  const prompts = [
    'read notes.txt and tell me what it says',
    ...Array.from({ length: 9 }, (_, i) => `step ${i + 1}: ${filler(i + 100, 350)}`),
  ];
  for (const p of prompts) {
    const from = pi.events.length;
    await pi.command({ type: 'prompt', message: p });
    await pi.waitFor((e) => e.type === 'agent_end', { from, what: 'agent_end' });
    const started = await pi
      .waitFor((e) => e.type === 'compaction_start', { from, ms: 1500, what: 'compaction_start' })
      .catch(() => undefined);
    if (started) return pi.waitFor((e) => e.type === 'compaction_end', { from, what: 'compaction_end' });
  }
  throw new Error('pi never compacted');
}

function sessionFile(state) {
  assert.ok(state.sessionFile, 'pi has a session file');
  return state.sessionFile;
}

function notices(pi) {
  return pi.events.filter((e) => e.type === 'extension_ui_request' && e.method === 'notify');
}

test('pi compaction is SOBA\'s: the capsule is the summary, the cut is SOBA\'s, the next request starts with it', async () => {
  const h = home();
  const pi = new Pi(h);
  try {
    const end = await talkUntilCompaction(pi);
    assert.equal(end.aborted, false, JSON.stringify(end));
    assert.ok(end.result, `compaction_end has a result: ${JSON.stringify(end)}\n${pi.stderr}`);
    const state = await pi.command({ type: 'get_state' });
    const entries = readJsonl(sessionFile(state));
    const compaction = entries.findLast((e) => e.type === 'compaction');
    assert.ok(compaction, 'pi recorded a compaction');
    assert.equal(compaction.fromHook, true, 'the compaction came from the extension');
    const { sessionId, checkpointId } = compaction.details.soba;
    assert.match(checkpointId, /^ck_/);

    // The cut: a pi entry before the compaction that pi can start from (not a tool result).
    const kept = entries.find((e) => e.id === compaction.firstKeptEntryId);
    assert.ok(kept, `firstKeptEntryId ${compaction.firstKeptEntryId} is an entry of the session`);
    assert.equal(kept.type, 'message');
    assert.notEqual(kept.message.role, 'toolResult');
    assert.ok(entries.indexOf(kept) < entries.indexOf(compaction));
    assert.ok(entries.indexOf(kept) > entries.findIndex((e) => e.type === 'message'), 'something was summarized');

    // The next request pi sends starts with the capsule, then the retained entries.
    const before = model.requests.length;
    await pi.command({ type: 'prompt', message: 'what was the flaky test again?' });
    await pi.waitFor((e) => e.type === 'agent_end', { from: pi.events.length - 1, what: 'agent_end' });
    const next = model.requests[before];
    const [system, first, second] = next.messages;
    assert.equal(system.role, 'system');
    assert.equal(first.role, 'user');
    assert.equal(messageText(first.content), COMPACTION_PREFIX + compaction.summary + '\n</summary>');
    assert.ok(messageText(second.content).length > 0);

    assert.ok(
      notices(pi).some((n) => n.notifyType === 'info' && n.message.includes(checkpointId)),
      'pi shows the SOBA compaction',
    );
    await pi.quit();

    // The summary is exactly the capsule SOBA itself puts at the head of this session's input.
    const logs = path.join(h.env.SOBA_DATA_DIR, 'workspaces');
    const log = fs
      .readdirSync(logs, { recursive: true })
      .map((f) => path.join(logs, f))
      .find((f) => f.endsWith(`${sessionId}.jsonl`));
    assert.ok(log, `SOBA's session log ${sessionId} exists`);
    const soba = readJsonl(log);
    assert.ok(soba.some((e) => e.type === 'capsule' && e.checkpointId === checkpointId));
    const context = JSON.parse(
      execFileSync(SOBA_BIN, ['context', log, '--json'], { env: h.env, cwd: h.workspace, encoding: 'utf8' }),
    );
    const capsule = context.messages[0];
    assert.equal(capsule.entryId, undefined);
    assert.equal(messageText(capsule.content), compaction.summary);
    assert.equal(context.messages[1].entryId, compaction.firstKeptEntryId, "SOBA's first kept entry is pi's");
  } finally {
    if (pi.child.exitCode === null) pi.child.kill();
  }
});
