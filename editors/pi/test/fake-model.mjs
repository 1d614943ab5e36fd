// An OpenAI-compatible chat-completions server on 127.0.0.1 that plays a scripted coding agent
// for pi. It records every request body, answers in the streaming format pi's provider reads,
// and reports usage from the request's size, so pi's context grows as it would with a real model.
import http from 'node:http';

export const PI_SUMMARY = '## Goal\npi summarized this itself (fallback).';

function text(content) {
  if (typeof content === 'string') return content;
  if (Array.isArray(content)) return content.map((b) => b.text ?? '').join('\n');
  return '';
}

/** Words that differ turn by turn, so no compression or caching makes them cheap. */
export function filler(seed, words) {
  return Array.from({ length: words }, (_, i) => `w${(seed * 7919 + i * 31) % 99991}`).join(' ');
}

function reply(body) {
  const messages = body.messages ?? [];
  const last = messages[messages.length - 1] ?? {};
  const all = messages.map((m) => text(m.content)).join('\n');
  if (all.includes('<conversation>')) return { content: PI_SUMMARY };
  if (last.role === 'tool') {
    return { content: `The notes say: ${text(last.content).slice(0, 60)}. ${filler(messages.length, 900)}` };
  }
  const asked = text(last.content);
  if (asked.includes('read notes.txt')) {
    return { toolCall: { id: `call_${messages.length}`, name: 'read', arguments: JSON.stringify({ path: 'notes.txt' }) } };
  }
  return { content: `Done: ${asked.slice(0, 40)}. ${filler(messages.length, 900)}` };
}

export async function startFakeModel() {
  const requests = [];
  /** Usage reported for each request, in order: what pi measures its context by. */
  const usage = [];
  /** What the model answered to each request, in order ({ content } or { toolCall }). */
  const replies = [];
  /** Answers given before the normal ones: { status, body } (an upstream error). */
  const script = [];
  const server = http.createServer((req, res) => {
    let raw = '';
    req.setEncoding('utf8');
    req.on('data', (d) => (raw += d));
    req.on('end', () => {
      if (req.method !== 'POST' || !req.url.endsWith('/chat/completions')) {
        res.writeHead(404).end();
        return;
      }
      const body = JSON.parse(raw);
      requests.push(body);
      const scripted = script.shift();
      if (scripted) {
        res.writeHead(scripted.status, { 'content-type': 'application/json' }).end(scripted.body);
        return;
      }
      const r = reply(body);
      replies.push(r);
      const promptTokens = Math.ceil(raw.length / 4);
      const id = `chatcmpl-${requests.length}`;
      const chunk = (delta, finish, usage) =>
        `data: ${JSON.stringify({
          id,
          object: 'chat.completion.chunk',
          created: 0,
          model: body.model,
          choices: [{ index: 0, delta, finish_reason: finish }],
          ...(usage ? { usage } : {}),
        })}\n\n`;
      res.writeHead(200, { 'content-type': 'text/event-stream' });
      if (r.toolCall) {
        res.write(chunk({ role: 'assistant', tool_calls: [{ index: 0, id: r.toolCall.id, type: 'function', function: { name: r.toolCall.name, arguments: r.toolCall.arguments } }] }, null));
        res.write(chunk({}, 'tool_calls'));
      } else {
        res.write(chunk({ role: 'assistant', content: r.content }, null));
        res.write(chunk({}, 'stop'));
      }
      const completion = Math.ceil((r.content ?? r.toolCall.arguments).length / 4);
      usage.push(promptTokens + completion);
      res.write(`data: ${JSON.stringify({ id, object: 'chat.completion.chunk', created: 0, model: body.model, choices: [], usage: { prompt_tokens: promptTokens, completion_tokens: completion, total_tokens: promptTokens + completion } })}\n\n`);
      res.end('data: [DONE]\n\n');
    });
  });
  await new Promise((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address();
  return {
    baseUrl: `http://127.0.0.1:${port}/v1`,
    requests,
    usage,
    replies,
    script,
    close: () => new Promise((resolve) => server.close(resolve)),
  };
}

export { text as messageText };
