// An agent loop over SOBA. The model sees exactly what `soba/preflight` returns, every step:
//
//   open → append the task → [ preflight → model → append reply → run tools → append results ]*
//        → turn/complete → close
//
// `callModel` is where a provider request goes (see toAnthropic / toOpenAIChat /
// toOpenAIResponses); run this file to see the loop with a scripted stand-in model:
//
//   node dist/examples/agent-loop.js /path/to/workspace
import { readFile } from 'node:fs/promises';
import * as path from 'node:path';

import {
  ErrorCode,
  isBlock,
  SobaClient,
  SobaError,
  type AppendedEntry,
  type CompactionResult,
  type ContentBlock,
  type ModelMessage,
  type Usage,
} from '../src';

export interface ModelReply {
  content: ContentBlock[];
  /**
   * The provider's usage of this inference, when it reports one: it anchors SOBA's budget to
   * the real count. Never send made-up numbers; an input of 0 would hide the whole history.
   */
  usage?: Usage;
}

/** Thrown by `callModel` when the provider rejects the input as too long. */
export class ContextOverflow extends Error {}

export type CallModel = (messages: ModelMessage[]) => Promise<ModelReply>;
export type Tool = (input: unknown) => Promise<{ output: string; isError?: boolean }>;

export interface AgentOptions {
  workspace: string;
  task: string;
  systemPrompt?: string;
  callModel: CallModel;
  tools: Record<string, Tool>;
  /** Model steps before giving up. */
  maxSteps?: number;
}

export interface AgentRun {
  sessionId: string;
  /** Text of the final assistant message. */
  answer: string;
  steps: number;
  /** Compactions that ran at a preflight or after an overflow. */
  compactions: CompactionResult[];
}

export async function runAgent(client: SobaClient, options: AgentOptions): Promise<AgentRun> {
  const { sessionId } = await client.openSession({ workspace: options.workspace });
  const compactions: CompactionResult[] = [];
  try {
    const first: AppendedEntry[] = [];
    if (options.systemPrompt) first.push({ type: 'setting', systemPrompt: options.systemPrompt });
    first.push({ type: 'message', role: 'user', content: [{ type: 'text', text: options.task }] });
    await client.append({ sessionId, entries: first });

    for (let step = 1; step <= (options.maxSteps ?? 20); step++) {
      // -32001 (BudgetExceeded) propagates: the input cannot fit, and nothing may be sent.
      const input = await client.preflight({ sessionId });
      if (input.compaction) compactions.push(input.compaction);

      let reply: ModelReply;
      try {
        reply = await options.callModel(input.messages);
      } catch (e) {
        if (!(e instanceof ContextOverflow)) throw e;
        // One recovery compaction per turn; a second overflow throws OverflowRetryUsed.
        const recovered = await client.overflow({ sessionId });
        compactions.push(recovered.compaction);
        if (!recovered.retryAllowed) {
          throw new Error(`the input does not fit the model: ${recovered.compaction.reason}`);
        }
        step--;
        continue;
      }
      await client.append({
        sessionId,
        entries: [{ type: 'message', role: 'assistant', content: reply.content, usage: reply.usage ?? null }],
      });

      const calls = reply.content.filter((b) => isBlock(b, 'tool_call'));
      if (!calls.length) {
        await client.turnComplete({ sessionId, usage: reply.usage ?? null });
        const answer = reply.content.map((b) => (isBlock(b, 'text') ? b.text : '')).join('');
        return { sessionId, answer, steps: step, compactions };
      }
      const results: AppendedEntry[] = [];
      for (const call of calls) {
        const tool = options.tools[call.name];
        const { output, isError } = tool
          ? await tool(call.input).catch((e: Error) => ({ output: e.message, isError: true }))
          : { output: `unknown tool ${call.name}`, isError: true };
        results.push({
          type: 'tool_result',
          callId: call.id,
          toolName: call.name,
          content: [{ type: 'text', text: output }],
          isError: isError ?? false,
        });
      }
      await client.append({ sessionId, entries: results });
    }
    throw new Error(`no answer within ${options.maxSteps ?? 20} steps`);
  } finally {
    await client.closeSession({ sessionId }).catch((e: unknown) => {
      // The session is already gone when the daemon went away; there is nothing to release.
      if (!(e instanceof SobaError && e.code === ErrorCode.UnknownSession)) throw e;
    });
  }
}

/** A stand-in model: reads README.md with the tool, then answers with its first line. */
export const scriptedModel: CallModel = async (messages) => {
  const last = messages[messages.length - 1];
  if (last.role !== 'tool') {
    return { content: [{ type: 'tool_call', id: `call_${messages.length}`, name: 'read_file', input: { path: 'README.md' } }] };
  }
  const text = last.content.map((b) => (isBlock(b, 'text') ? b.text : '')).join('');
  return { content: [{ type: 'text', text: `The README starts with: ${text.split('\n')[0]}` }] };
};

if (require.main === module) {
  const workspace = path.resolve(process.argv[2] ?? '.');
  (async () => {
    const client = await SobaClient.spawn({ workspaceFolders: [workspace] });
    client.on('soba/compaction', (n) => n.phase === 'end' && console.log(n.message));
    try {
      const run = await runAgent(client, {
        workspace,
        task: 'What does the README say first?',
        callModel: scriptedModel,
        tools: {
          read_file: async (input) => ({
            output: await readFile(path.join(workspace, (input as { path: string }).path), 'utf8'),
          }),
        },
      });
      console.log(`${run.answer}\n(${run.steps} steps, session ${run.sessionId})`);
    } finally {
      await client.close();
    }
  })().catch((e: Error) => {
    console.error(e.message);
    process.exit(1);
  });
}
