// An OpenAI-compatible chat-completions server on 127.0.0.1 that plays a scripted coding agent
// for pi. It records every request body, answers in the streaming format pi's provider reads,
// and reports usage from the request's size, so pi's context grows as it would with a real model.
import http from 'node:http';

export const PI_SUMMARY = '## Goal\npi summarized this itself (fallback).';

/** What the model writes when SOBA asks it for a capsule state (through the pi extension). */
export const SOBA_STATE = {
  goal: 'Work through the numbered steps and fix the flaky auth_retry test',
  constraints: ['Keep answers short'],
  completed: ['Read notes.txt: the flaky test is auth_retry', 'Rewrote src/invented_module.ts'],
  active: ['Working through the numbered steps'],
  pending: [],
  decisions: [],
  blockers: [],
  nextSteps: ['Continue with the next step'],
};

/** A request SOBA sends to summarize (its system prompt opens so). */
export function isSobaSummary(body) {
  const first = (body.messages ?? [])[0];
  return first?.role === 'system' && text(first.content).startsWith('You write the Context Capsule');
}

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
  if (isSobaSummary(body)) return { content: JSON.stringify(SOBA_STATE) };
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
  /** The headers of each request, in order. */
  const headers = [];
  /** Usage reported for each of pi's requests, in order: what pi measures its context by. */
  const usage = [];
  /** What the model answered to each of pi's requests, in order ({ content } or { toolCall }). */
  const replies = [];
  /** Answers given before the normal ones: { status, body } (an upstream error). */
  const script = [];
  /**
   * Answers to SOBA's summarization requests given before the normal one: { status, body } (an
   * error), or { delayMs } (the normal answer, that long after the request).
   */
  const summaryScript = [];
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
      headers.push(req.headers);
      const scripted = isSobaSummary(body) ? summaryScript.shift() : script.shift();
      if (scripted?.delayMs) {
        const timer = setTimeout(() => answer(body, raw, res), scripted.delayMs);
        res.on('close', () => clearTimeout(timer));
        return;
      }
      if (scripted) {
        res.writeHead(scripted.status, { 'content-type': 'application/json' }).end(scripted.body);
        return;
      }
      answer(body, raw, res);
    });
  });
  /** The normal streamed answer to `body`. */
  const answer = (body, raw, res) => {
    if (res.destroyed) return;
    const r = reply(body);
    // pi's context is measured by its own requests; SOBA's summarization is not part of it.
    const agent = !isSobaSummary(body);
    if (agent) replies.push(r);
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
    if (agent) usage.push(promptTokens + completion);
    res.write(`data: ${JSON.stringify({ id, object: 'chat.completion.chunk', created: 0, model: body.model, choices: [], usage: { prompt_tokens: promptTokens, completion_tokens: completion, total_tokens: promptTokens + completion } })}\n\n`);
    res.end('data: [DONE]\n\n');
  };
  await new Promise((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address();
  return {
    baseUrl: `http://127.0.0.1:${port}/v1`,
    requests,
    headers,
    usage,
    replies,
    script,
    summaryScript,
    close: () => new Promise((resolve) => server.close(resolve)),
  };
}

export { text as messageText };
