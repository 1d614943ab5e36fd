// A longer pi session made of one real one: its entries copied `copies` times, each copy's ids
// prefixed (`c1-`, `c2-`, …) and its first entry continuing the previous copy's last, under the
// first copy's header. pi and SOBA then open the same long, real session.
// Usage: node chain-pi.mjs PI_SESSION.jsonl COPIES OUTPUT.jsonl
import { readFileSync, writeFileSync } from "node:fs";

const [input, copiesArg, output] = process.argv.slice(2);
const copies = Number(copiesArg);
if (!input || !output || !(copies >= 1)) {
  console.error("usage: node chain-pi.mjs PI_SESSION.jsonl COPIES OUTPUT.jsonl");
  process.exit(2);
}
const [header, ...entries] = readFileSync(input, "utf8")
  .split("\n")
  .filter((l) => l.trim() !== "")
  .map((l) => JSON.parse(l));
if (header.type !== "session") {
  console.error(`${input}: the first line is not a pi session header`);
  process.exit(2);
}
const lines = [JSON.stringify(header)];
let last = null;
for (let k = 0; k < copies; k++) {
  const id = (x) => (x == null || k === 0 ? x : `c${k}-${x}`);
  for (const e of entries) {
    const copy = { ...e, id: id(e.id), parentId: e.parentId == null ? last : id(e.parentId) };
    if (e.firstKeptEntryId != null) copy.firstKeptEntryId = id(e.firstKeptEntryId);
    lines.push(JSON.stringify(copy));
  }
  last = id(entries[entries.length - 1].id);
}
writeFileSync(output, lines.join("\n") + "\n");
