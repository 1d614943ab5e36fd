// Real pi (the pinned npm release, without the SOBA extension and with its own compaction off)
// pointed at `soba proxy --standalone`, whose upstream is the loopback fake model: SOBA's proxy
// alone keeps pi's requests under the hard limit, compacts (the capsule written by the same
// model, through the same upstream, with pi's key), passes the streams through unchanged, and
// hands an upstream error to pi as the same error.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import fs from 'node:fs';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';
import { startFakeModel, filler, isSobaSummary, messageText, SOBA_STATE } from './fake-model.mjs';
import { Pi, readJsonl, MODEL } from './pi-harness.mjs';

const SOBA_BIN = process.env.SOBA_BIN;
const SAFETY_RESERVE = 1000;
/** SOBA's hard limit for this model: window - max output - safety reserve. */
const HARD_LIMIT = MODEL.contextWindow - MODEL.maxTokens - SAFETY_RESERVE;

let model;
let root;
let proxy;
let proxyLog = '';

async function freePort() {
  const srv = net.createServer();
  await new Promise((resolve) => srv.listen(0, '127.0.0.1', resolve));
  const { port } = srv.address();
  await new Promise((resolve) => srv.close(resolve));
  return port;
}

before(async () => {
  assert.ok(SOBA_BIN && fs.existsSync(SOBA_BIN), 'SOBA_BIN names the soba binary (scripts/test sets it)');
  model = await startFakeModel();
  root = fs.realpathSync(fs.mkdtempSync(path.join(os.tmpdir(), 'soba-pi-proxy-')));
});
after(async () => {
  if (proxy && proxy.exitCode === null) {
    proxy.kill();
    await new Promise((resolve) => proxy.once('exit', resolve));
  }
  await model.close();
  fs.rmSync(root, { recursive: true, force: true });
});

/** pi's home (no extension installed; compaction and retries off) and the proxy in front of the fake model. */
async function setUp() {
  const agentDir = path.join(root, 'agent');
  const workspace = path.join(root, 'work');
  fs.mkdirSync(agentDir, { recursive: true });
  fs.mkdirSync(path.join(workspace, '.soba'), { recursive: true });
  fs.writeFileSync(path.join(workspace, 'notes.txt'), 'remember: the flaky test is auth_retry\n');
  fs.writeFileSync(
    path.join(workspace, '.soba', 'config.json'),
    JSON.stringify({
      compaction: { keepRecentTokens: 2000, safetyReserveTokens: SAFETY_RESERVE, minTokensForAutoCompact: 3000 },
    }),
  );
  const port = await freePort();
  const env = {
    PATH: process.env.PATH,
    HOME: root,
    SOBA_DATA_DIR: path.join(root, 'soba-data'),
    SOBA_RUNTIME_DIR: path.join(root, 'soba-run'),
    SOBA_CONFIG: path.join(root, 'no-user-config.json'),
  };
  proxy = spawn(
    SOBA_BIN,
    ['proxy', '--standalone', '--listen', `127.0.0.1:${port}`, '--upstream', model.baseUrl,
      '--context-window', String(MODEL.contextWindow), '--max-output-tokens', String(MODEL.maxTokens)],
    { cwd: workspace, env, stdio: ['ignore', 'ignore', 'pipe'] },
  );
  proxy.stderr.setEncoding('utf8');
  await new Promise((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`the proxy did not start: ${proxyLog}`)), 20000);
    proxy.stderr.on('data', (d) => {
      proxyLog += d;
      if (proxyLog.includes('listening on')) {
        clearTimeout(timer);
        resolve();
      }
    });
    proxy.once('exit', (code) => reject(new Error(`the proxy exited (${code}): ${proxyLog}`)));
  });
  fs.writeFileSync(
    path.join(agentDir, 'models.json'),
    JSON.stringify({
      providers: {
        fake: {
          baseUrl: `http://127.0.0.1:${port}/v1`,
          api: 'openai-completions',
          apiKey: 'test-key',
          compat: { supportsDeveloperRole: false, supportsReasoningEffort: false, supportsUsageInStreaming: true },
          models: [{ ...MODEL, name: 'Fake Coder', reasoning: false, input: ['text'], cost: { input: 0, output: 0, cacheRead: 0, cacheWrite: 0 } }],
        },
      },
    }),
  );
  fs.writeFileSync(
    path.join(agentDir, 'settings.json'),
    JSON.stringify({
      defaultProvider: 'fake',
      defaultModel: MODEL.id,
      // SOBA's proxy does the compacting here, not pi; and an error reaches the session as is.
      compaction: { enabled: false },
      retry: { enabled: false },
    }),
  );
  return {
    workspace,
    env: { PATH: process.env.PATH, HOME: root, PI_CODING_AGENT_DIR: agentDir, PI_OFFLINE: '1', PI_SKIP_VERSION_CHECK: '1', PI_TELEMETRY: '0' },
  };
}

function assistantText(message) {
  return message.content.filter((b) => b.type === 'text').map((b) => b.text).join('');
}

test("pi through soba proxy: requests stay under the hard limit, the upstream's model writes the capsule with pi's key, streams reach pi unchanged, an upstream error reaches pi as the same error", async () => {
  const home = await setUp();
  const pi = new Pi(home);
  try {
    const prompts = ['read notes.txt and tell me what it says', ...Array.from({ length: 11 }, (_, i) => `step ${i}: ${filler(200 + i, 350)}`)];
    for (const message of prompts) {
      const from = pi.events.length;
      await pi.command({ type: 'prompt', message });
      await pi.waitFor((e) => e.type === 'agent_end', { from, what: 'agent_end' });
    }

    // pi's requests and SOBA's summarization requests, which went to the same upstream with
    // pi's key and model.
    const chats = model.requests.filter((r) => !isSobaSummary(r));
    const summaries = model.requests.map((r, i) => [r, model.headers[i]]).filter(([r]) => isSobaSummary(r));
    assert.ok(summaries.length > 0, 'the proxy summarized through the upstream');
    for (const [body, headers] of summaries) {
      assert.equal(headers.authorization, 'Bearer test-key');
      assert.equal(body.model, MODEL.id);
    }
    // Never over the hard limit (about four characters of JSON per token, an overestimate).
    for (const [i, body] of chats.entries()) {
      const estimate = Math.ceil(JSON.stringify(body.messages).length / 4);
      assert.ok(estimate <= HARD_LIMIT, `upstream request ${i} is ~${estimate} tokens, over the hard limit ${HARD_LIMIT}`);
    }
    // pi sent everything it had; the upstream saw SOBA's capsule instead of the old turns.
    const last = chats.at(-1).messages;
    assert.equal(last[0].role, 'system', 'the system prompt goes as sent');
    assert.match(JSON.stringify(last[1].content), /Context Capsule/, 'the upstream saw the capsule');
    assert.ok(messageText(last[1].content).includes(SOBA_STATE.goal), "the capsule is the model's");
    assert.match(proxyLog, /compaction completed \([a-z_]+, model\)/, 'the proxy says who wrote it');
    assert.ok(!model.requests.some((r) => JSON.stringify(r.messages).includes('"pi summarized')), 'pi never compacted itself');
    // The real read tool ran in the workspace, and its output went upstream.
    assert.ok(
      chats.some((r) => r.messages.some((m) => m.role === 'tool' && JSON.stringify(m.content).includes('auth_retry'))),
      "pi's read tool result went upstream",
    );

    // What pi recorded is exactly what the model streamed, reply for reply.
    const state = await pi.command({ type: 'get_state' });
    assert.ok(state.sessionFile, 'pi has a session file');
    const assistants = readJsonl(state.sessionFile)
      .filter((e) => e.type === 'message' && e.message.role === 'assistant')
      .map((e) => e.message);
    assert.equal(assistants.length, model.replies.length, 'one assistant message per model reply');
    for (const [i, r] of model.replies.entries()) {
      if (r.toolCall) {
        const call = assistants[i].content.find((b) => b.type === 'toolCall');
        assert.ok(call, `reply ${i} is a tool call in pi's session`);
        assert.equal(call.id, r.toolCall.id);
        assert.equal(call.name, r.toolCall.name);
        assert.deepEqual(call.arguments, JSON.parse(r.toolCall.arguments));
      } else {
        assert.equal(assistantText(assistants[i]), r.content, `reply ${i} reached pi unchanged`);
      }
    }

    // An upstream error reaches pi as the same error. (A 401, which pi's OpenAI client does not
    // retry by itself the way it retries a 429.)
    const error = { error: { message: 'Incorrect API key provided: test-k***ey (proxy suite)', type: 'invalid_request_error', param: null, code: 'invalid_api_key' } };
    model.script.push({ status: 401, body: JSON.stringify(error) });
    const before = model.requests.length;
    const from = pi.events.length;
    await pi.command({ type: 'prompt', message: 'one more thing' });
    await pi.waitFor((e) => e.type === 'agent_end', { from, what: 'agent_end after the error' });
    assert.equal(model.requests.length, before + 1, 'the proxy sent the request once and did not retry an error that is not an overflow');
    const failed = readJsonl(state.sessionFile).findLast((e) => e.type === 'message' && e.message.role === 'assistant').message;
    assert.equal(failed.stopReason, 'error');
    assert.match(failed.errorMessage, /401/);
    assert.ok(failed.errorMessage.includes(error.error.message), `pi got the upstream's error: ${failed.errorMessage}`);
    assert.match(proxyLog, /→ 401/, 'the proxy answered pi with the upstream status');
    assert.ok(!proxyLog.includes('test-key'), 'the key is never logged');

    // pi's conversation is one session: every request carried the replies the proxy forwarded,
    // and pi resent them as they came, so nothing was rewound.
    const sessionsDir = path.join(root, 'soba-data', 'workspaces');
    const logs = fs.readdirSync(sessionsDir).flatMap((w) => {
      const dir = path.join(sessionsDir, w, 'sessions');
      return fs.existsSync(dir) ? fs.readdirSync(dir).filter((f) => f.endsWith('.jsonl')).map((f) => path.join(dir, f)) : [];
    });
    assert.equal(logs.length, 1, `one session for pi's conversation: ${logs}`);
    assert.ok(!readJsonl(logs[0]).some((e) => e.type === 'rewind'), 'no rewind');
  } finally {
    await pi.quit();
  }
});
