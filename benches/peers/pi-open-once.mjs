// pi's resume as a process of its own, for the side by side with `soba budget --json`: Node
// starts, loads pi's session manager and compaction code, opens the session file, builds its
// context, estimates its tokens and decides whether to compact, prints the estimate and exits.
// Usage: node pi-open-once.mjs PI_SESSION.jsonl CONTEXT_WINDOW
const dist = new URL(
  "./node_modules/@mariozechner/pi-coding-agent/dist/core/",
  import.meta.url,
);
const { SessionManager } = await import(new URL("session-manager.js", dist));
const { estimateContextTokens, shouldCompact, DEFAULT_COMPACTION_SETTINGS } = await import(
  new URL("compaction/compaction.js", dist)
);
const [file, windowArg] = process.argv.slice(2);
const sm = SessionManager.open(file, file.slice(0, file.lastIndexOf("/")));
const estimate = estimateContextTokens(sm.buildSessionContext().messages);
const due = shouldCompact(estimate.tokens, Number(windowArg), DEFAULT_COMPACTION_SETTINGS);
console.log(JSON.stringify({ tokens: estimate.tokens, due }));
