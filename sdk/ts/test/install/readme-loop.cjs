// The README's loop, run from a fresh folder that installed the packed SDK (scripts/test-install):
// a 24k-token window (the small-window default of docs/configuration.md), a scripted stand-in
// model that reads README.md with a tool, then answers with its first line.
const fs = require('node:fs');
const path = require('node:path');
const { SobaClient, isBlock } = require('@soba/sdk');

const workspace = path.resolve(process.argv[2]);
const systemPrompt = 'Be brief.';
const task = 'What does the README say first?';

function model(messages) {
  const last = messages[messages.length - 1];
  if (last.role !== 'tool') {
    return { content: [{ type: 'tool_call', id: `call_${messages.length}`, name: 'read_file', input: { path: 'README.md' } }] };
  }
  const text = last.content.map((b) => (isBlock(b, 'text') ? b.text : '')).join('');
  return { content: [{ type: 'text', text: `The README starts with: ${text.split('\n')[0]}` }] };
}

function runTool(call) {
  const output = fs.readFileSync(path.join(workspace, call.input.path), 'utf8');
  return { type: 'tool_result', callId: call.id, toolName: call.name, content: [{ type: 'text', text: output }], isError: false };
}

(async () => {
  const soba = await SobaClient.spawn({ workspaceFolders: [workspace] }); // $SOBA_BIN
  try {
    const opened = await soba.openSession({ workspace, model: { name: 'local-24k', contextWindow: 24000 } });
    const { sessionId } = opened;
    await soba.append({ sessionId, entries: [{ type: 'setting', systemPrompt }, { type: 'message', role: 'user', content: [{ type: 'text', text: task }] }] });
    let answer = '';
    for (;;) {
      const { messages } = await soba.preflight({ sessionId });
      const reply = model(messages);
      await soba.append({ sessionId, entries: [{ type: 'message', role: 'assistant', ...reply }] });
      const calls = reply.content.filter((b) => b.type === 'tool_call');
      if (!calls.length) {
        answer = reply.content.map((b) => (isBlock(b, 'text') ? b.text : '')).join('');
        break;
      }
      await soba.append({ sessionId, entries: calls.map(runTool) });
    }
    await soba.turnComplete({ sessionId });
    await soba.closeSession({ sessionId });
    console.log(`${answer} (hard limit ${opened.budget.hardLimit})`);
  } finally {
    await soba.close();
  }
})().catch((e) => {
  console.error(e);
  process.exit(1);
});
