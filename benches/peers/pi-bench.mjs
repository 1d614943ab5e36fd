// pi's side of the comparison: its own session open and its compaction check, timed like
// SOBA's side (median of many runs), on a copy of the same pi session file.
// Usage: node pi-bench.mjs PI_SESSION.jsonl CONTEXT_WINDOW
import { copyFileSync, existsSync, mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { performance } from "node:perf_hooks";
import { spawnSync } from "node:child_process";

const dist = new URL(
  "./node_modules/@mariozechner/pi-coding-agent/dist/core/",
  import.meta.url,
);
const { SessionManager } = await import(new URL("session-manager.js", dist));
const { estimateContextTokens, shouldCompact, prepareCompaction, DEFAULT_COMPACTION_SETTINGS } =
  await import(new URL("compaction/compaction.js", dist));

const [input, windowArg] = process.argv.slice(2);
if (!input || !windowArg) {
  console.error("usage: node pi-bench.mjs PI_SESSION.jsonl CONTEXT_WINDOW");
  process.exit(2);
}
const contextWindow = Number(windowArg);
const dir = mkdtempSync(join(tmpdir(), "pi-bench-"));
const file = join(dir, "session.jsonl");
copyFileSync(input, file);

// Median time per call, timed in batches of `batch` calls (so that calls shorter than the
// clock's own cost are measured), as SOBA's side does.
let sink = 0;
function median(budgetMs, batch, f) {
  const times = [];
  const started = performance.now();
  while (times.length < 5 || (performance.now() - started < budgetMs && times.length < 100000)) {
    const t = performance.now();
    for (let i = 0; i < batch; i++) {
      if (f()) sink++;
    }
    times.push((performance.now() - t) / batch);
  }
  times.sort((a, b) => a - b);
  return times[Math.floor(times.length / 2)] * 1000; // microseconds
}

// Open: what `pi --session FILE` does before the first prompt.
const open = median(3000, 1, () => {
  const sm = SessionManager.open(file, dir);
  return sm.buildSessionContext();
});
// The same, in CPU time (user + system) per call: on a shared machine the wall clock also
// counts the time spent waiting for a core, and SOBA's process figures are given in both.
const openCpuRuns = [];
for (let i = 0; i < 41; i++) {
  const before = process.cpuUsage();
  SessionManager.open(file, dir).buildSessionContext();
  const used = process.cpuUsage(before);
  openCpuRuns.push(used.user + used.system);
}
openCpuRuns.sort((a, b) => a - b);
const openCpu = openCpuRuns[Math.floor(openCpuRuns.length / 2)];
const sm = SessionManager.open(file, dir);
const messages = sm.buildSessionContext().messages;
const settings = DEFAULT_COMPACTION_SETTINGS;
let due = false;
// Check: the estimate and the threshold decision pi makes after each response.
const check = median(2000, 10000, () => {
  const estimate = estimateContextTokens(messages);
  due = shouldCompact(estimate.tokens, contextWindow, settings);
  return due;
});
// Plan: pi's compaction preparation (cut point, messages to summarize).
const plan = median(2000, 1, () => prepareCompaction(sm.getBranch(), settings));
const estimate = estimateContextTokens(messages);
// Append + check: one more assistant reply (with its usage, as pi records it) joins the
// context, then the estimate and the threshold decision.
const lastAssistant = [...messages].reverse().find((m) => m.role === "assistant" && m.usage);
const grown = [...messages];
let n = 0;
const appendAndCheck = median(2000, 100, () => {
  n++;
  grown.push({
    ...lastAssistant,
    content: [
      { type: "text", text: `Done: step ${n} of the refactor passes its tests; next I update the docs.` },
    ],
  });
  return shouldCompact(estimateContextTokens(grown).tokens, contextWindow, settings);
});
// The same resume as a process of its own (`pi-open-once.mjs`): what a CLI call pays, Node's
// start-up and module loading included: the median wall time of the runs, as SOBA's side
// measures `soba budget --json`.
const once = new URL("./pi-open-once.mjs", import.meta.url).pathname;
// Its CPU time comes from `/usr/bin/time` where there is one.
const timeTool = existsSync("/usr/bin/time") ? "/usr/bin/time" : null;
const processRuns = [];
const processCpuRuns = [];
for (let i = 0; i < 21; i++) {
  const [cmd, args] = timeTool
    ? [timeTool, ["-f", "cpu %U %S", process.execPath, once, file, String(contextWindow)]]
    : [process.execPath, [once, file, String(contextWindow)]];
  const t = performance.now();
  const run = spawnSync(cmd, args);
  const wall = performance.now() - t;
  if (run.status !== 0) {
    console.error(`pi-open-once failed: ${run.stderr}`);
    process.exit(1);
  }
  processRuns.push(wall * 1000);
  const cpu = /cpu ([0-9.]+) ([0-9.]+)/.exec(String(run.stderr));
  if (cpu) processCpuRuns.push((Number(cpu[1]) + Number(cpu[2])) * 1e6);
}
const mid = (xs) => (xs.length ? xs.sort((a, b) => a - b)[Math.floor(xs.length / 2)] : null);
const openAndCheckProcess = mid(processRuns);
const openAndCheckProcessCpu = mid(processCpuRuns);
rmSync(dir, { recursive: true, force: true });
console.log(
  JSON.stringify({
    version: JSON.parse(
      (await import("node:fs")).readFileSync(
        new URL("./node_modules/@mariozechner/pi-coding-agent/package.json", import.meta.url),
      ),
    ).version,
    messages: messages.length,
    estimatedTokens: estimate.tokens,
    compactDue: due,
    micros: {
      open,
      openCpu,
      check,
      appendAndCheck,
      plan,
      openAndCheckProcess,
      openAndCheckProcessCpu,
    },
  }),
);
