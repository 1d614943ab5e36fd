// The example agent loop, run against the real daemon with scripted models.
import assert from 'node:assert/strict';
import * as fs from 'node:fs';
import * as path from 'node:path';
import { after, test } from 'node:test';

import { ContextOverflow, runAgent, scriptedModel, type CallModel } from '../examples/agent-loop';
import { ErrorCode, isBlock, SobaError, type ModelMessage } from '../src';
import { sandbox, words } from './helpers';

const box = sandbox('loop');
after(() => box.cleanup());

const readFileTool = (ws: string) => async (input: unknown) => ({
  output: fs.readFileSync(path.join(ws, (input as { path: string }).path), 'utf8'),
});

test('the loop sends exactly the preflight input, runs the tool and closes the session', async () => {
  const ws = box.workspace('loop');
  fs.writeFileSync(path.join(ws, 'README.md'), 'Auth service\nmore text\n');
  const c = await box.connect(ws);
  const seen: ModelMessage[][] = [];
  const model: CallModel = async (messages) => {
    seen.push(messages);
    return scriptedModel(messages);
  };
  const run = await runAgent(c, {
    workspace: ws,
    task: 'What does the README say first?',
    systemPrompt: 'Be brief.',
    callModel: model,
    tools: { read_file: readFileTool(ws) },
  });
  assert.equal(run.answer, 'The README starts with: Auth service');
  assert.equal(run.steps, 2);
  assert.deepEqual(
    seen.map((ms) => ms.map((m) => m.role)),
    [['user'], ['user', 'assistant', 'tool']],
  );
  assert.equal(seen[1][2].toolCallId, isBlock(seen[1][1].content[0], 'tool_call') ? seen[1][1].content[0].id : '');
  assert.deepEqual((await c.sessions({ workspace: ws })).sessions, [], 'the run closed its session');
});

/** A model that reads `reads` chunks (about 3000 tokens each), then does what `after` says. */
function readingModel(reads: number, after: (call: number) => 'overflow' | 'answer') {
  const sizes: number[] = [];
  const model: CallModel = async (messages) => {
    sizes.push(messages.length);
    if (sizes.length <= reads) {
      return { content: [{ type: 'tool_call', id: `call_${sizes.length}`, name: 'read_chunk', input: { n: sizes.length } }] };
    }
    if (after(sizes.length) === 'overflow') throw new ContextOverflow('prompt is too long');
    return { content: [{ type: 'text', text: 'done' }] };
  };
  return { model, sizes };
}

const readChunk = async (input: unknown) => ({ output: words((input as { n: number }).n) });

test('a provider overflow gets one recovery compaction and the step is retried', async () => {
  const ws = box.workspace('overflow');
  const c = await box.connect(ws);
  const { model, sizes } = readingModel(2, (call) => (call === 3 ? 'overflow' : 'answer'));
  const run = await runAgent(c, { workspace: ws, task: 'Read the chunks.', callModel: model, tools: { read_chunk: readChunk } });
  assert.equal(run.answer, 'done');
  assert.equal(run.compactions.length, 1);
  assert.equal(run.compactions[0].trigger, 'context_overflow');
  assert.equal(run.compactions[0].outcome, 'completed', run.compactions[0].reason);
  assert.equal(sizes.length, 4);
  assert.ok(sizes[3] < sizes[2], `the retry sends the compacted input: ${sizes}`);
});

test('a second overflow in one turn stops the loop with OverflowRetryUsed', async () => {
  const ws = box.workspace('overflow-twice');
  const c = await box.connect(ws);
  const { model } = readingModel(2, () => 'overflow');
  await assert.rejects(
    runAgent(c, { workspace: ws, task: 'Read the chunks.', callModel: model, tools: { read_chunk: readChunk } }),
    (e: unknown) => e instanceof SobaError && e.code === ErrorCode.OverflowRetryUsed,
  );
  assert.deepEqual((await c.sessions({ workspace: ws })).sessions, [], 'the session is closed all the same');
});

test('an overflow that no compaction can fix stops the loop with the reason', async () => {
  const ws = box.workspace('overflow-small');
  const c = await box.connect(ws);
  // The task alone overflows: no history to summarize, no tool output to elide.
  const { model } = readingModel(0, () => 'overflow');
  await assert.rejects(
    runAgent(c, { workspace: ws, task: 'Read the chunk.', callModel: model, tools: { read_chunk: readChunk } }),
    /^Error: the input does not fit the model: /,
  );
});
