#!/usr/bin/env node
// Copies the protocol's JSON Schemas (../../schemas/protocol/*.schema.json) into this package
// (schemas/protocol/), so that a packed copy (`npm pack`, run by `prepack`) holds everything
// gen-types.mjs reads and builds outside the SOBA repository.
import fs from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

const here = path.dirname(fileURLToPath(import.meta.url));
const from = path.resolve(here, '../../../schemas/protocol');
const to = path.resolve(here, '../schemas/protocol');

if (!fs.existsSync(from)) {
  if (fs.existsSync(to)) process.exit(0); // a packed copy: its schemas are already inside
  console.error(`no protocol schemas at ${from} or ${to}: run this in the SOBA repository's sdk/ts`);
  process.exit(1);
}
fs.rmSync(to, { recursive: true, force: true });
// The daemon's methods, and in client/ the requests it sends to clients (`soba/summarize`).
for (const sub of ['.', 'client']) {
  fs.mkdirSync(path.join(to, sub), { recursive: true });
  for (const f of fs.readdirSync(path.join(from, sub)).filter((f) => f.endsWith('.schema.json'))) {
    fs.copyFileSync(path.join(from, sub, f), path.join(to, sub, f));
  }
}
