// A small agent for the end-to-end test: `soba serve` (relaying to the shared daemon of `env`)
// spoken to over vscode-jsonrpc, opening a session on the workspace and filling it with turns.
// It stays connected while the editor runs, so the session stays live.

import { spawn } from 'node:child_process';
import { createRequire } from 'node:module';
import { pathToFileURL } from 'node:url';

// vscode-jsonrpc is a dev dependency of the extension itself (../node_modules).
const require = createRequire(new URL('../package.json', import.meta.url));
const rpc = require('vscode-jsonrpc/node');

const WORDS = (
  'the parser reads each token from the input stream and builds a syntax tree that the checker ' +
  'walks twice once to collect declarations and once to resolve every reference against scopes ' +
  'while the emitter writes bytecode for functions closures loops and pattern matches'
).split(' ');

/** About `tokens` tokens of varied English, different for every `seed`. */
export function prose(seed, tokens) {
  const out = [`Step ${seed}:`];
  for (let i = 0; out.length < tokens; i++) out.push(WORDS[(seed * 7 + i * 3) % WORDS.length]);
  return out.join(' ');
}

export class Agent {
  constructor(binary, env, workspace) {
    this.binary = binary;
    this.workspace = workspace;
    this.stderr = '';
    this.proc = spawn(binary, ['serve'], { env: { ...process.env, ...env }, stdio: ['pipe', 'pipe', 'pipe'] });
    this.proc.stderr.on('data', (chunk) => (this.stderr += chunk.toString()));
    this.proc.stdin.on('error', () => undefined);
    this.conn = rpc.createMessageConnection(new rpc.StreamMessageReader(this.proc.stdout), new rpc.StreamMessageWriter(this.proc.stdin));
    this.conn.onNotification(() => undefined);
    this.conn.onRequest(() => null);
    this.conn.listen();
  }

  async initialize() {
    const uri = pathToFileURL(this.workspace).toString();
    await this.conn.sendRequest('initialize', { processId: process.pid, rootUri: uri, workspaceFolders: [{ uri, name: 'workspace' }], capabilities: {} });
    this.conn.sendNotification('initialized', {});
  }

  request(method, params) {
    return this.conn.sendRequest(method, params);
  }

  /** Opens a session and appends turns until its effective tokens pass `atLeast`. */
  async openFilled(model, atLeast) {
    const opened = await this.request('soba/session/open', { workspace: this.workspace, create: true, model });
    let budget = opened.budget;
    for (let i = 0; budget.effectiveTokens < atLeast; i++) {
      const role = i % 2 ? 'user' : 'assistant';
      ({ budget } = await this.request('soba/session/append', {
        sessionId: opened.sessionId,
        entries: [{ type: 'message', role, content: [{ type: 'text', text: prose(i, 300) }] }],
      }));
    }
    return { sessionId: opened.sessionId, budget };
  }

  async stop() {
    const exited = new Promise((resolve) => {
      if (this.proc.exitCode !== null || this.proc.signalCode !== null) resolve();
      else this.proc.once('exit', resolve);
    });
    try {
      await Promise.race([this.conn.sendRequest('shutdown'), new Promise((r) => setTimeout(r, 2000))]);
      await this.conn.sendNotification('exit');
    } catch {
      // Already gone.
    }
    // The daemon exits on `exit`; the connection is let go only after that, so no write is
    // left pending on a closed pipe.
    const timer = setTimeout(() => this.proc.kill('SIGTERM'), 3000);
    await exited;
    clearTimeout(timer);
    this.conn.dispose();
  }
}
