// pi's modes with the extension and the real daemon, against the fake model: print mode
// (`pi -p`, `pi -c -p`), whose last turn is followed by a compaction that runs while pi ends the
// run; RPC mode driven by its commands; interactive pi in a terminal; SOBA failing or timing out
// in print mode; pi stopped by a signal during SOBA's compaction. After each run nothing pi
// started is left running.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { startFakeModel, filler, messageText, isSobaSummary, PI_SUMMARY } from './fake-model.mjs';
import { execFileSync } from 'node:child_process';
import {
  makeHome,
  Pi,
  InteractivePi,
  runPi,
  waitForTurn,
  piSessionFile,
  sobaLog,
  readJsonl,
  processesOf,
  assertNothingLeft,
} from './pi-harness.mjs';

const SOBA_BIN = process.env.SOBA_BIN;
const COMPACTION_PREFIX = 'The conversation history before this point was compacted into the following summary:\n\n<summary>\n';
/**
 * One `pi -p` run whose last turn takes pi's context past its compaction threshold (16k window,
 * 4k reserve): the fake model reports usage by request size, so this is the same every time.
 */
const FIRST_RUN = ['read notes.txt and tell me what it says', ...Array.from({ length: 5 }, (_, i) => `step ${i}: ${filler(i, 350)}`)];
const SOBA_NOTICE = /SOBA compacted \d+ → \d+ tokens \((ck_\w+), (model|degraded)\)\./;

let model;
const homes = [];
const scratch = fs.realpathSync(fs.mkdtempSync(path.join(os.tmpdir(), 'soba-pi-modes-')));
before(async () => {
  assert.ok(SOBA_BIN && fs.existsSync(SOBA_BIN), 'SOBA_BIN names the soba binary (scripts/test sets it)');
  model = await startFakeModel();
});
after(async () => {
  await model.close();
  for (const h of homes) h.remove();
  fs.rmSync(scratch, { recursive: true, force: true });
});

/** A home whose shared daemon exits 1 s after its last client, so the tests can see it go. */
function home({ env = {}, ...options } = {}) {
  const h = makeHome({ baseUrl: model.baseUrl, sobaBin: SOBA_BIN, env: { SOBA_DAEMON_IDLE_SECS: '1', ...env }, ...options });
  homes.push(h);
  return h;
}

function brokenSoba(name, script) {
  const file = path.join(scratch, name);
  fs.writeFileSync(file, `#!/bin/sh\n${script}\n`, { mode: 0o755 });
  return file;
}

/** The run ended with a compaction right after its last turn, which pi answered first. */
function compactionAfterLastTurn(h, run) {
  const entries = readJsonl(piSessionFile(h));
  const last = entries.at(-1);
  assert.equal(last.type, 'compaction', `the run ends with a compaction: ${JSON.stringify(last).slice(0, 300)}\n${run.stderr}`);
  const turn = entries.at(-2);
  assert.equal(turn.type, 'message');
  assert.equal(turn.message.role, 'assistant');
  const answer = turn.message.content.filter((c) => c.type === 'text').map((c) => c.text).join('');
  assert.equal(run.stdout, `${answer}\n`, "pi printed the last turn's answer");
  return last;
}

function assertSobaCompaction(h, compaction, run) {
  assert.equal(compaction.fromHook, true, `the extension compacted: ${run.stderr}`);
  assert.match(compaction.summary, /^# Context Capsule ck_/);
  const { sessionId, checkpointId } = compaction.details.soba;
  const notice = run.stderr.match(SOBA_NOTICE);
  assert.ok(notice, `pi -p says SOBA compacted, on stderr: ${run.stderr}`);
  assert.equal(notice[1], checkpointId);
  const soba = readJsonl(sobaLog(h, sessionId));
  assert.ok(soba.some((e) => e.type === 'capsule' && e.checkpointId === checkpointId), `capsule ${checkpointId} in SOBA's log`);
  assert.doesNotMatch(run.stderr, /stale|Extension error/);
}

test('pi -p: the compaction after the run\'s last turn goes through SOBA, pi records its capsule, and nothing is left running', async () => {
  const h = home();
  const run = await runPi(h, ['-p', ...FIRST_RUN]);
  assert.equal(run.code, 0, run.stderr);
  const compaction = compactionAfterLastTurn(h, run);
  assertSobaCompaction(h, compaction, run);
  assert.equal(compaction.details.soba.quality, 'model');
  await assertNothingLeft(h);
});

test('pi -c -p continues the session from the capsule and its end-of-run compaction continues the same SOBA session', async () => {
  const h = home();
  const first = await runPi(h, ['-p', ...FIRST_RUN]);
  const compaction = compactionAfterLastTurn(h, first);
  assertSobaCompaction(h, compaction, first);

  // One turn per run: every compaction from here on comes at the end of a `pi -c -p` run.
  let again;
  for (let i = 0; i < 10 && !again; i++) {
    const from = model.requests.length;
    const run = await runPi(h, ['-c', '-p', `step ${600 + i}: ${filler(600 + i, 350)}`]);
    assert.equal(run.code, 0, run.stderr);
    const [system, summary] = model.requests[from].messages;
    assert.equal(system.role, 'system');
    const latest = readJsonl(piSessionFile(h)).findLast((e) => e.type === 'compaction');
    if (latest.id !== compaction.id) {
      again = compactionAfterLastTurn(h, run);
      assertSobaCompaction(h, again, run);
    } else {
      assert.equal(messageText(summary.content), `${COMPACTION_PREFIX}${compaction.summary}\n</summary>`, 'the continued run starts from the capsule');
    }
    assert.deepEqual(processesOf(h).filter((p) => !p.cmd.includes('--daemon')), [], 'no soba serve outlives its pi run');
  }
  assert.ok(again, 'pi compacted again within 10 continued runs');
  assert.equal(again.details.soba.sessionId, compaction.details.soba.sessionId, 'the same SOBA session');
  assert.notEqual(again.details.soba.checkpointId, compaction.details.soba.checkpointId);
  await assertNothingLeft(h);
});

test('pi --mode rpc: a prompt and the compact command go through SOBA; closing its input ends pi and everything it started', async () => {
  const h = home();
  const pi = new Pi(h);
  try {
    for (const message of ['read notes.txt and tell me what it says', `step 700: ${filler(700, 250)}`, `step 701: ${filler(701, 250)}`]) {
      const from = pi.events.length;
      await pi.command({ type: 'prompt', message });
      await pi.waitFor((e) => e.type === 'agent_end', { from, what: 'agent_end' });
    }
    const result = await pi.command({ type: 'compact', customInstructions: 'keep the flaky test name' });
    assert.match(result.summary, /^# Context Capsule ck_/);
    const state = await pi.command({ type: 'get_state' });
    const compaction = readJsonl(state.sessionFile).findLast((e) => e.type === 'compaction');
    assert.equal(compaction.fromHook, true);
    assert.equal(compaction.details.soba.checkpointId, result.details.soba.checkpointId);
    await pi.waitFor((e) => e.type === 'extension_ui_request' && e.method === 'notify' && SOBA_NOTICE.test(e.message), {
      ms: 10000,
      what: 'the notice of the SOBA compaction',
    });
    const soba = readJsonl(sobaLog(h, result.details.soba.sessionId));
    assert.ok(soba.some((e) => e.type === 'capsule' && e.checkpointId === result.details.soba.checkpointId));
    assert.ok(processesOf(h, [pi.child.pid]).some((p) => !p.cmd.includes('--daemon')), 'soba serve runs while pi does');
    await pi.quit();
    assert.equal(pi.child.exitCode, 0, pi.stderr);
    await assertNothingLeft(h);
  } finally {
    if (pi.child.exitCode === null) pi.child.kill();
  }
});

test('pi -p with a daemon that never answers: the warning is on stderr, pi compacts on its own, the daemon is stopped', async () => {
  const h = home({ sobaBin: brokenSoba('silent-soba', 'exec sleep 300'), timeoutMs: 1500 });
  const run = await runPi(h, ['-p', ...FIRST_RUN]);
  assert.equal(run.code, 0, run.stderr);
  assert.match(
    run.stderr,
    /^SOBA did not compact \(no answer to initialize within 1\.5s from `.*silent-soba serve`\); pi compacts on its own\.$/m,
  );
  const compaction = compactionAfterLastTurn(h, run);
  assert.ok(compaction.summary.startsWith(PI_SUMMARY), compaction.summary);
  assert.ok(!compaction.fromHook);
  await assertNothingLeft(h);
});

test("pi -p when SOBA's compaction outlasts the extension's deadline: the warning is on stderr, pi compacts on its own, soba serve is stopped", async () => {
  const h = home({ timeoutMs: 3000 });
  // pi's model takes 20 s to write SOBA's capsule; the extension waits 3 s for each answer.
  model.summaryScript.push({ delayMs: 20000 });
  const run = await runPi(h, ['-p', ...FIRST_RUN]);
  assert.equal(model.summaryScript.length, 0, 'SOBA asked pi\'s model');
  assert.equal(run.code, 0, run.stderr);
  assert.match(run.stderr, /^SOBA did not compact \(no answer to soba\/compact within 3s from `.* serve`\); pi compacts on its own\.$/m);
  const compaction = compactionAfterLastTurn(h, run);
  assert.ok(compaction.summary.startsWith(PI_SUMMARY), compaction.summary);
  assert.ok(!compaction.fromHook);
  await assertNothingLeft(h);
});

for (const signal of ['SIGTERM', 'SIGINT']) {
  test(`pi -p stopped by ${signal} while SOBA compacts: pi exits and no soba serve is left`, async () => {
    const h = home();
    // The capsule never comes in time: pi is stopped while SOBA waits for pi's model.
    model.summaryScript.push({ delayMs: 60000 });
    const from = model.requests.length;
    const started = Date.now();
    const run = await runPi(h, ['-p', ...FIRST_RUN], {
      onStart: (child) => {
        const poll = setInterval(() => {
          if (model.requests.slice(from).some(isSobaSummary)) {
            clearInterval(poll);
            child.kill(signal);
          }
        }, 20);
        child.once('exit', () => clearInterval(poll));
      },
    });
    assert.ok(model.requests.slice(from).some(isSobaSummary), `pi was stopped during SOBA's compaction: ${run.stderr}`);
    assert.ok(run.code === 143 || run.signal === signal, `pi ended by ${signal}: ${JSON.stringify({ code: run.code, signal: run.signal })}`);
    assert.ok(Date.now() - started < 30000, 'pi did not wait for the compaction');
    await assertNothingLeft(h, { relayMs: 2000 });
  });
}

function hasScript() {
  try {
    execFileSync('script', ['--version'], { stdio: 'ignore' });
    return true;
  } catch {
    return false;
  }
}
const NO_TERMINAL = !hasScript() && 'needs script(1) (util-linux) to give pi a terminal';

const INTERACTIVE = [
  {
    name: "SOBA's compaction and its notice",
    options: {},
    notice: SOBA_NOTICE,
    check: (compaction) => assert.equal(compaction.fromHook, true),
  },
  {
    name: "the fallback warning when soba is missing, after pi's own compaction",
    options: { sobaBin: '/nonexistent/soba' },
    notice: /SOBA did not compact \(cannot start `\/nonexistent\/soba serve`: spawn \/nonexistent\/soba ENOENT\); pi compacts on its own\./,
    check: (compaction) => assert.ok(compaction.summary.startsWith(PI_SUMMARY) && !compaction.fromHook),
  },
];

for (const c of INTERACTIVE) {
  test(`interactive pi shows ${c.name} once it has redrawn the chat; /quit ends pi and soba serve`, { skip: NO_TERMINAL }, async () => {
    const h = home(c.options);
    const pi = new InteractivePi(h);
    try {
      await pi.waitForScreen(/fake-coder/);
      for (const [i, message] of FIRST_RUN.entries()) {
        await pi.submit(message);
        await waitForTurn(h, i + 1);
      }
      await pi.waitForScreen(/Compacted from/);
      await pi.waitForScreen(c.notice, 10000);
      const compaction = readJsonl(piSessionFile(h)).at(-1);
      assert.equal(compaction.type, 'compaction');
      c.check(compaction);
      await pi.submit('/quit');
      assert.equal(await pi.exited, 0);
      await assertNothingLeft(h);
    } finally {
      if (pi.child.exitCode === null) pi.child.kill();
    }
  });
}
