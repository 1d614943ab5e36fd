// The example agent loop in 16k and 32k windows on the defaults, with tool results of about 2.9k
// tokens: the task finishes, compactions come at most once in three requests, every tool call the
// model sees keeps its result, and the session log stays small.
import assert from 'node:assert/strict';
import * as fs from 'node:fs';
import * as path from 'node:path';
import { after, test } from 'node:test';

import { runAgent, type CallModel } from '../examples/agent-loop';
import { isBlock, type CompactionResult, type ModelMessage } from '../src';
import { sandbox } from './helpers';

const box = sandbox('small-windows');
after(() => box.cleanup());

// Enough reads that the history is several windows long: at 16k, ~16 × 2.9k is ~4.5 hard limits.
const READS = 16;
// The fewest requests between two compactions: a compaction leaves room for the next steps.
const MIN_REQUESTS_BETWEEN_COMPACTIONS = 3;

/** About 2.9k tokens of distinct text (SOBA counts `w1234` as three tokens). */
const toolOutput = (n: number) => Array.from({ length: 960 }, (_, w) => `w${(n * 7919 + w) % 9973}`).join(' ');

/** Tool calls without their result and results without their call, in one model input. */
function unpairedToolMessages(messages: ModelMessage[]): string[] {
  const calls = new Set<string>();
  const problems: string[] = [];
  for (const m of messages) {
    if (m.role === 'assistant') {
      for (const b of m.content) if (isBlock(b, 'tool_call')) calls.add(b.id);
    } else if (m.role === 'tool') {
      const id = m.toolCallId ?? '';
      if (!calls.delete(id)) problems.push(`result ${id} without its call`);
    }
  }
  for (const id of calls) problems.push(`call ${id} without its result`);
  return problems;
}

async function runLoop(window: number) {
  const ws = path.join(box.base, `window-${window}`);
  fs.mkdirSync(path.join(ws, '.soba'), { recursive: true });
  // Only the window: every other figure is SOBA's default, scaled to the window.
  fs.writeFileSync(path.join(ws, '.soba', 'config.json'), JSON.stringify({ model: { name: 'gpt-4o', contextWindow: window } }));
  const workspace = fs.realpathSync(ws);
  const client = await box.connect(workspace);
  // What each preflight sent and whether it compacted.
  const requests: { tokens: number; compaction: CompactionResult | null; messages: ModelMessage[] }[] = [];
  const preflight = client.preflight.bind(client);
  client.preflight = async (params) => {
    const result = await preflight(params);
    requests.push({ tokens: result.tokens, compaction: result.compaction ?? null, messages: result.messages });
    return result;
  };
  let calls = 0;
  const model: CallModel = async () => {
    calls++;
    if (calls <= READS) {
      return { content: [{ type: 'tool_call', id: `call_${calls}`, name: 'read_chunk', input: { n: calls } }] };
    }
    return { content: [{ type: 'text', text: `read ${calls - 1} chunks` }] };
  };
  const run = await runAgent(client, {
    workspace,
    task: 'Read every chunk, then say how many you read.',
    callModel: model,
    tools: { read_chunk: async (input) => ({ output: toolOutput((input as { n: number }).n) }) },
    maxSteps: READS + 1,
  });
  assert.equal(run.answer, `read ${READS} chunks`, 'the task finished');

  const at = requests.flatMap((r, i) => (r.compaction ? [i] : []));
  const compactions = requests.flatMap((r) => (r.compaction ? [r.compaction] : []));
  assert.ok(compactions.length >= 2, 'the history is several windows long: the loop compacted');
  for (const c of compactions) assert.equal(c.outcome, 'completed', c.reason);
  const hardLimit = compactions[0].hardLimit;
  const peak = Math.max(...requests.map((r) => r.tokens));
  const figures =
    `window ${window}: ${requests.length} inferences, ${compactions.length} compactions at requests [${at}], ` +
    `peak input ${peak} of hard limit ${hardLimit} (${Math.round((100 * peak) / hardLimit)}%)`;
  process.stderr.write(`   ${figures}\n`);
  at.slice(1).forEach((b, k) => assert.ok(b - at[k] >= MIN_REQUESTS_BETWEEN_COMPACTIONS, figures));
  assert.ok(peak <= hardLimit, figures);
  requests.forEach((r, i) => assert.deepEqual(unpairedToolMessages(r.messages), [], `request ${i}`));

  // The session log holds the loop's entries and one record per compaction; the loop's own text
  // is about 16 × 6 kB, so a log of capsule after capsule would stand out.
  const workspaces = path.join(box.base, 'data', 'workspaces');
  const logs = fs
    .readdirSync(workspaces)
    .flatMap((w) => {
      const dir = path.join(workspaces, w, 'sessions');
      return fs.existsSync(dir) ? fs.readdirSync(dir).map((f) => path.join(dir, f)) : [];
    })
    .filter((f) => f.endsWith(`${run.sessionId}.jsonl`));
  assert.equal(logs.length, 1, `${logs}`);
  const records = fs
    .readFileSync(logs[0], 'utf8')
    .split('\n')
    .filter((l) => l.trim())
    .map((l) => JSON.parse(l) as { type: string });
  // A completed compaction is its capsule in the log (other outcomes a `compaction` record).
  const logged = records.filter((r) => r.type === 'capsule' || r.type === 'compaction');
  assert.equal(logged.length, compactions.length, 'the log records each compaction once');
  const size = fs.statSync(logs[0]).size;
  assert.ok(size < 400_000, `the session log is ${size} bytes`);
}

test('a 16k window on the defaults finishes the task with room between compactions', async () => {
  await runLoop(16384);
});

test('a 32k window on the defaults finishes the task with room between compactions', async () => {
  await runLoop(32768);
});
