// pi (the pinned npm release) compacting through this extension and the real SOBA daemon,
// against a fake model on 127.0.0.1; and pi falling back to its own compaction when SOBA
// cannot answer.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { startFakeModel, filler, messageText, isSobaSummary, PI_SUMMARY, SOBA_STATE } from './fake-model.mjs';
import { makeHome, Pi, readJsonl, MODEL, PI_RESERVE_TOKENS } from './pi-harness.mjs';

const SOBA_BIN = process.env.SOBA_BIN;
const COMPACTION_PREFIX = 'The conversation history before this point was compacted into the following summary:\n\n<summary>\n';

let model;
const homes = [];
const scratch = fs.realpathSync(fs.mkdtempSync(path.join(os.tmpdir(), 'soba-pi-bins-')));
before(async () => {
  assert.ok(SOBA_BIN && fs.existsSync(SOBA_BIN), 'SOBA_BIN names the soba binary (scripts/test sets it)');
  model = await startFakeModel();
});
after(async () => {
  await model.close();
  for (const h of homes) h.remove();
  fs.rmSync(scratch, { recursive: true, force: true });
});

function home(options = {}) {
  const h = makeHome({ baseUrl: model.baseUrl, sobaBin: SOBA_BIN, ...options });
  homes.push(h);
  return h;
}

/**
 * Turns until pi compacts (its window is 16k tokens, ~3k a turn); returns the compaction_end
 * event. pi compacts after a run whose last response reported more than window - reserve
 * tokens of context, which the fake model's reported usage says in advance.
 */
async function talkUntilCompaction(pi, { first = 'read notes.txt and tell me what it says', seed = 100 } = {}) {
  const prompts = [first, ...Array.from({ length: 9 }, (_, i) => `step ${seed + i}: ${filler(seed + i, 350)}`)];
  for (const p of prompts) {
    const from = pi.events.length;
    await pi.command({ type: 'prompt', message: p });
    await pi.waitFor((e) => e.type === 'agent_end', { from, what: 'agent_end' });
    if (model.usage.at(-1) > MODEL.contextWindow - PI_RESERVE_TOKENS) {
      return pi.waitFor((e) => e.type === 'compaction_end', { from, what: 'compaction_end' });
    }
  }
  throw new Error('pi never compacted');
}

/** One turn that leaves pi's context under its compaction threshold. */
async function prompt(pi, message) {
  const from = pi.events.length;
  await pi.command({ type: 'prompt', message });
  await pi.waitFor((e) => e.type === 'agent_end', { from, what: 'agent_end' });
  assert.ok(model.usage.at(-1) <= MODEL.contextWindow - PI_RESERVE_TOKENS, 'no compaction is due after this turn');
}

/** A request pi sent: system prompt, then the compaction summary, then the kept entries. */
function assertStartsWithCapsule(request, summary) {
  const [system, first, second] = request.messages;
  assert.equal(system.role, 'system');
  assert.equal(first.role, 'user');
  assert.equal(messageText(first.content), COMPACTION_PREFIX + summary + '\n</summary>');
  assert.match(summary, /^# Context Capsule ck_/);
  assert.ok(messageText(second.content).length > 0);
}

function sessionFile(state) {
  assert.ok(state.sessionFile, 'pi has a session file');
  return state.sessionFile;
}

/** Indexes of SOBA's summarization requests to the model from `from` on. */
function sobaSummaries(from = 0) {
  return model.requests.map((r, i) => (i >= from && isSobaSummary(r) ? i : -1)).filter((i) => i >= 0);
}

/** The first notice pi's UI got that satisfies `pred` (it comes just after compaction_end). */
function notice(pi, pred, what) {
  return pi.waitFor((e) => e.type === 'extension_ui_request' && e.method === 'notify' && pred(e), { ms: 10000, what });
}

test("pi's compactions (automatic and /compact) are SOBA's, written by pi's model: capsule as summary, SOBA's cut, the next request starts with it, across a restart", async () => {
  const h = home();
  let pi = new Pi(h);
  try {
    const summariesBefore = model.requests.length;
    const end = await talkUntilCompaction(pi);
    assert.equal(end.aborted, false, JSON.stringify(end));
    assert.ok(end.result, `compaction_end has a result: ${JSON.stringify(end)}\n${pi.stderr}`);
    const state = await pi.command({ type: 'get_state' });
    const file = sessionFile(state);
    const entries = readJsonl(file);
    const compaction = entries.findLast((e) => e.type === 'compaction');
    assert.ok(compaction, 'pi recorded a compaction');
    assert.equal(compaction.fromHook, true, 'the compaction came from the extension');
    const { sessionId, checkpointId } = compaction.details.soba;
    assert.match(checkpointId, /^ck_/);
    assert.equal(compaction.summary, end.result.summary);

    // pi's model wrote the capsule, from SOBA's prompt and facts, with pi's key; SOBA checked it.
    const asked = sobaSummaries(summariesBefore);
    assert.ok(asked.length > 0, "SOBA's prompt went to pi's model");
    for (const i of asked) {
      assert.equal(model.headers[i].authorization, 'Bearer test-key');
      assert.equal(model.requests[i].model, MODEL.id);
      const user = messageText(model.requests[i].messages[1].content);
      assert.match(user, /## Recorded facts \(ground truth from the log/);
      assert.match(user, /Read files: notes\.txt/);
    }
    assert.ok(!model.requests.slice(summariesBefore).some((r) => messageText(r.messages.at(-1)?.content).includes('<conversation>')), 'pi wrote no summary of its own');
    assert.equal(compaction.details.soba.quality, 'model');
    assert.ok(compaction.summary.includes(SOBA_STATE.goal), compaction.summary);
    assert.ok(compaction.summary.includes('Read notes.txt: the flaky test is auth_retry'));
    assert.ok(!compaction.summary.includes('src/invented_module.ts'), 'an invented file is dropped');

    // The cut: a pi entry before the compaction that pi can start from (not a tool result).
    const kept = entries.find((e) => e.id === compaction.firstKeptEntryId);
    assert.ok(kept, `firstKeptEntryId ${compaction.firstKeptEntryId} is an entry of the session`);
    assert.equal(kept.type, 'message');
    assert.notEqual(kept.message.role, 'toolResult');
    assert.ok(entries.indexOf(kept) < entries.indexOf(compaction));
    assert.ok(entries.indexOf(kept) > entries.findIndex((e) => e.type === 'message'), 'something was summarized');
    await notice(pi, (n) => n.notifyType === 'info' && n.message.includes(checkpointId), 'the notice of the SOBA compaction');

    // The next request pi sends starts with the capsule, then the retained entries.
    const before = model.requests.length;
    await prompt(pi, 'what was the flaky test again?');
    assertStartsWithCapsule(model.requests[before], compaction.summary);
    await pi.quit();

    // pi again, continuing the session: it still starts from the capsule, and its next
    // compaction continues the same SOBA session after that capsule.
    pi = new Pi(h, ['--continue']);
    const resumed = model.requests.length;
    await prompt(pi, 'now fix it');
    assertStartsWithCapsule(model.requests[resumed], compaction.summary);
    const second = await talkUntilCompaction(pi, { first: 'and the retry logic', seed: 200 });
    assert.ok(second.result, JSON.stringify(second));
    const again = readJsonl(file).findLast((e) => e.type === 'compaction');
    assert.notEqual(again.id, compaction.id);
    assert.equal(again.details.soba.sessionId, sessionId, 'the second compaction continued the SOBA session');
    assert.notEqual(again.details.soba.checkpointId, checkpointId);
    const afterSecond = model.requests.length;
    await prompt(pi, 'and now?');
    assertStartsWithCapsule(model.requests[afterSecond], again.summary);

    // `/compact` with instructions goes through SOBA too, once there is history to fold: right
    // after a compaction the continuation would not be smaller, and SOBA rightly declines.
    await prompt(pi, `step 300: ${filler(300, 250)}`);
    await prompt(pi, `step 301: ${filler(301, 250)}`);
    const requestsBefore = model.requests.length;
    const manual = await pi.command({ type: 'compact', customInstructions: 'keep the flaky test name' });
    assert.equal(manual.details.soba.sessionId, sessionId);
    assert.match(manual.summary, /^# Context Capsule ck_/);
    assert.equal(manual.details.soba.quality, 'model');
    const manualAsks = sobaSummaries(requestsBefore);
    assert.equal(manualAsks.length, model.requests.length - requestsBefore, "the only model requests were SOBA's prompts");
    assert.ok(manualAsks.length > 0);
    assert.match(messageText(model.requests[manualAsks[0]].messages[1].content), /keep the flaky test name/);
    const last = readJsonl(file).findLast((e) => e.type === 'compaction');
    assert.equal(last.details.soba.checkpointId, manual.details.soba.checkpointId);
    await pi.quit();

    // SOBA's log holds every pi entry once, all three capsules, and SOBA's own input for the
    // session now is exactly what pi sends: the latest capsule, then pi's kept entries.
    const logs = path.join(h.env.SOBA_DATA_DIR, 'workspaces');
    const log = fs
      .readdirSync(logs, { recursive: true })
      .map((f) => path.join(logs, f))
      .find((f) => f.endsWith(`${sessionId}.jsonl`));
    assert.ok(log, `SOBA's session log ${sessionId} exists`);
    const soba = readJsonl(log);
    assert.equal(new Set(soba.map((e) => e.id)).size, soba.length, 'every pi entry reached SOBA once');
    for (const ck of [checkpointId, again.details.soba.checkpointId, last.details.soba.checkpointId]) {
      assert.ok(soba.some((e) => e.type === 'capsule' && e.checkpointId === ck), `capsule ${ck} in SOBA's log`);
    }
    const context = JSON.parse(
      execFileSync(SOBA_BIN, ['context', log, '--json'], { env: h.env, cwd: h.workspace, encoding: 'utf8' }),
    );
    const capsule = context.messages[0];
    assert.equal(capsule.entryId, undefined);
    assert.equal(messageText(capsule.content), last.summary);
    assert.equal(context.messages[1].entryId, last.firstKeptEntryId, "SOBA's first kept entry is pi's");
  } finally {
    if (pi.child.exitCode === null) pi.child.kill();
  }
});

test("when pi's model fails to summarize, SOBA's local capsule stands in (degraded) and pi keeps SOBA's compaction", async () => {
  const h = home();
  const pi = new Pi(h);
  try {
    model.summaryScript.push({ status: 500, body: JSON.stringify({ error: { message: 'the model is overloaded', type: 'server_error' } }) });
    const end = await talkUntilCompaction(pi, { seed: 400 });
    assert.ok(end.result, JSON.stringify(end));
    const state = await pi.command({ type: 'get_state' });
    const compaction = readJsonl(sessionFile(state)).findLast((e) => e.type === 'compaction');
    assert.equal(compaction.fromHook, true);
    assert.equal(compaction.details.soba.quality, 'degraded');
    assert.match(compaction.summary, /^# Context Capsule ck_/);
    assert.ok(!compaction.summary.includes(SOBA_STATE.goal));
    assert.equal(model.summaryScript.length, 0, "SOBA asked pi's model first");
    await notice(pi, (n) => n.notifyType === 'info' && n.message.includes('degraded'), 'the notice of a degraded SOBA compaction');
    await pi.quit();
  } finally {
    if (pi.child.exitCode === null) pi.child.kill();
  }
});

test("SOBA_PI_LOCAL_CAPSULES=1 keeps pi's model out: SOBA builds its capsule locally", async () => {
  const h = home({ env: { SOBA_PI_LOCAL_CAPSULES: '1' } });
  const pi = new Pi(h);
  try {
    const from = model.requests.length;
    const end = await talkUntilCompaction(pi, { seed: 500 });
    assert.ok(end.result, JSON.stringify(end));
    assert.deepEqual(sobaSummaries(from), [], "no SOBA prompt reached pi's model");
    const state = await pi.command({ type: 'get_state' });
    const compaction = readJsonl(sessionFile(state)).findLast((e) => e.type === 'compaction');
    assert.equal(compaction.fromHook, true);
    assert.equal(compaction.details.soba.quality, 'local');
    await pi.quit();
  } finally {
    if (pi.child.exitCode === null) pi.child.kill();
  }
});

/** Executables standing in for a broken SOBA. */
function brokenSoba(dir, name, script) {
  const file = path.join(dir, name);
  fs.writeFileSync(file, `#!/bin/sh\n${script}\n`, { mode: 0o755 });
  return file;
}

const SOBA_DOWN = [
  {
    name: 'the soba binary is missing',
    bin: (dir) => path.join(dir, 'no-such-soba'),
    reason: /cannot start `.*no-such-soba serve`: spawn .* ENOENT/,
  },
  {
    name: 'the daemon fails to start',
    bin: (dir) => brokenSoba(dir, 'failing-soba', 'echo "soba: cannot create the runtime folder" >&2; exit 3'),
    reason: /`.*failing-soba serve` exited with code 3: soba: cannot create the runtime folder/,
  },
  {
    name: 'the daemon does not answer in time',
    bin: (dir) => brokenSoba(dir, 'silent-soba', 'exec sleep 300'),
    timeoutMs: 1500,
    reason: /no answer to initialize within 1\.5s/,
  },
];

for (const down of SOBA_DOWN) {
  test(`pi falls back to its own compaction, with a warning, when ${down.name}`, async () => {
    const h = home({ sobaBin: down.bin(scratch), timeoutMs: down.timeoutMs });
    const pi = new Pi(h);
    try {
      const end = await talkUntilCompaction(pi);
      assert.ok(end.result, `pi compacted: ${JSON.stringify(end)}\n${pi.stderr}`);
      const warning = await notice(pi, (n) => n.notifyType === 'warning', 'the fallback warning');
      assert.match(warning.message, /^SOBA did not compact \(/);
      assert.match(warning.message, down.reason);
      assert.match(warning.message, /pi compacts on its own\.$/);

      const state = await pi.command({ type: 'get_state' });
      const compaction = readJsonl(sessionFile(state)).findLast((e) => e.type === 'compaction');
      assert.ok(compaction.summary.startsWith(PI_SUMMARY), compaction.summary);
      assert.ok(!compaction.fromHook);
      assert.equal(compaction.details?.soba, undefined);
      await pi.quit();
    } finally {
      if (pi.child.exitCode === null) pi.child.kill();
    }
  });
}
