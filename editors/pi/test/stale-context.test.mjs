// The extension (dist/index.js) against pi's extension context going stale: pi invalidates it
// when it disposes the session (the end of a `pi -p` run), and a compaction pi started after
// the last turn may begin only then. The extension then works from what it read while the
// context was live, and never reads the stale one.
import { test, after } from 'node:test';
import assert from 'node:assert/strict';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import soba from '../dist/index.js';

const dir = fs.realpathSync(fs.mkdtempSync(path.join(os.tmpdir(), 'soba-pi-stale-')));
after(() => fs.rmSync(dir, { recursive: true, force: true }));
const STALE = 'This extension ctx is stale after session replacement or reload.';

/** The extension loaded into a stand-in for pi, with SOBA_BIN naming a missing binary. */
function load() {
  const handlers = {};
  const saved = process.env.SOBA_BIN;
  process.env.SOBA_BIN = path.join(dir, 'no-such-soba');
  try {
    soba({ on: (name, handler) => (handlers[name] = handler) });
  } finally {
    if (saved === undefined) delete process.env.SOBA_BIN;
    else process.env.SOBA_BIN = saved;
  }
  return handlers;
}

/** A live context; `notices` collects what its UI shows (no UI: print mode). */
function liveContext(notices) {
  return {
    cwd: dir,
    model: undefined,
    modelRegistry: {},
    hasUI: notices !== undefined,
    ui: { notify: (message, level) => notices?.push({ message, level }) },
  };
}

/** A context pi has invalidated: every read throws, as pi's does. */
function staleContext() {
  const stale = {
    get() {
      throw new Error(STALE);
    },
  };
  return Object.defineProperties({}, { cwd: stale, model: stale, modelRegistry: stale, hasUI: stale, ui: stale });
}

function compaction() {
  return { signal: new AbortController().signal, branchEntries: [], preparation: { tokensBefore: 12000 } };
}

/** Run `f` with process.stderr captured; returns what was written. */
async function stderrOf(f) {
  const write = process.stderr.write;
  let written = '';
  process.stderr.write = (chunk) => {
    written += String(chunk);
    return true;
  };
  try {
    await f();
  } finally {
    process.stderr.write = write;
  }
  return written;
}

test("a compaction that starts after pi invalidated its context warns in pi's UI as read while live, once pi has recorded it", async () => {
  const handlers = load();
  const notices = [];
  await handlers.session_start({ type: 'session_start', reason: 'startup' }, liveContext(notices));
  const result = await handlers.session_before_compact(compaction(), staleContext());
  assert.equal(result, undefined, 'pi compacts on its own');
  // pi's interactive UI redraws its chat when the compaction ends: the warning comes after.
  assert.deepEqual(notices, []);
  await handlers.session_compact({ type: 'session_compact', fromExtension: false }, staleContext());
  assert.deepEqual(notices, []);
  await new Promise((r) => setTimeout(r, 0));
  assert.equal(notices.length, 1);
  assert.equal(notices[0].level, 'warning');
  assert.match(notices[0].message, /^SOBA did not compact \(cannot start `.*no-such-soba serve`: spawn .*ENOENT\); pi compacts on its own\.$/);
});

test('in print mode (no UI) the warning goes to stderr, also when the context is already stale', async () => {
  const handlers = load();
  await handlers.session_start({ type: 'session_start', reason: 'startup' }, liveContext(undefined));
  const written = await stderrOf(() => handlers.session_before_compact(compaction(), staleContext()));
  assert.match(written, /^SOBA did not compact \(cannot start `.*no-such-soba serve`: spawn .*ENOENT\); pi compacts on its own\.\n$/);
});

test("a warning of a compaction pi did not record shows at the next turn", async () => {
  const handlers = load();
  const notices = [];
  await handlers.session_start({ type: 'session_start', reason: 'startup' }, liveContext(notices));
  await handlers.session_before_compact(compaction(), liveContext(notices));
  assert.deepEqual(notices, []);
  await handlers.agent_start({ type: 'agent_start' }, liveContext(notices));
  assert.equal(notices.length, 1);
  assert.match(notices[0].message, /^SOBA did not compact \(cannot start/);
});

test('a stale context with nothing read before it: pi compacts on its own, and stderr says why', async () => {
  const handlers = load();
  const written = await stderrOf(() => handlers.session_before_compact(compaction(), staleContext()));
  assert.equal(written, 'SOBA did not compact (pi ended the session before the extension saw it start); pi compacts on its own.\n');
});
