// An agent's home for the tests: a temporary Claude Code config folder holding a workspace's live
// transcript, an environment that reads no real home, and the budget `soba import` gives for a
// transcript as it stands (what the followed session must show).

import { execFileSync } from 'node:child_process';
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import type { BudgetReport } from '../src/protocol';
import { SOBA_BIN, makeDir, prose } from './daemon';
import { REPO_ROOT } from './paths';

/** The real transcripts beside the checkout (`../shared`), as the Rust tests find them. */
export const SHARED_TRANSCRIPTS = path.resolve(REPO_ROOT, '..', 'shared', 'fixtures', 'transcripts');

/** Claude Code's project folder name: every character but ASCII letters and digits becomes `-`. */
export function claudeProjectDir(cwd: string): string {
  return cwd.replace(/[^A-Za-z0-9]/g, '-');
}

export class AgentHome {
  readonly tmp = fs.realpathSync(fs.mkdtempSync(path.join(os.tmpdir(), 'soba-follow-')));
  readonly workspace = makeDir(path.join(this.tmp, 'my_app'));
  readonly claude = makeDir(path.join(this.tmp, 'claude'));
  readonly project = path.join(this.claude, 'projects', claudeProjectDir(this.workspace));
  private imports = 0;

  /**
   * Everything the daemon reads from its environment: SOBA's folders, the agents' homes and HOME
   * itself in `tmp`, so no real transcript, config or daemon is ever touched.
   */
  env(idleSecs: number): Record<string, string> {
    return {
      HOME: makeDir(path.join(this.tmp, 'home')),
      CLAUDE_CONFIG_DIR: this.claude,
      CODEX_HOME: path.join(this.tmp, 'codex'),
      PI_CODING_AGENT_DIR: path.join(this.tmp, 'pi'),
      SOBA_DATA_DIR: makeDir(path.join(this.tmp, 'data')),
      SOBA_RUNTIME_DIR: makeDir(path.join(this.tmp, 'runtime')),
      SOBA_CONFIG: path.join(this.tmp, 'no-user-config.json'),
      XDG_CONFIG_HOME: makeDir(path.join(this.tmp, 'config')),
      XDG_DATA_HOME: makeDir(path.join(this.tmp, 'xdg-data')),
      SOBA_DAEMON_IDLE_SECS: '2',
      SOBA_ATTACH_IDLE_SECS: String(idleSecs),
    };
  }

  /** The transcript of Claude Code session `id` (its file name is the session id). */
  transcript(id: string): string {
    makeDir(this.project);
    return path.join(this.project, `${id}.jsonl`);
  }

  /** The budget `soba import` + `soba budget` give for `transcript` as it is now. */
  importedBudget(
    transcript: string,
  ): Pick<BudgetReport, 'effectiveTokens' | 'hardLimit' | 'softLimit' | 'source' | 'contextWindow' | 'maxOutputTokens'> {
    const env = { ...process.env, ...this.env(300) };
    const out = path.join(makeDir(path.join(this.tmp, 'imported')), `${path.basename(transcript)}-${++this.imports}.jsonl`);
    execFileSync(SOBA_BIN, ['import', transcript, '--output', out, '--json'], { env, stdio: 'pipe' });
    return JSON.parse(execFileSync(SOBA_BIN, ['budget', out, '--json'], { env, stdio: 'pipe' }).toString());
  }

  remove(): void {
    fs.rmSync(this.tmp, { recursive: true, force: true });
  }
}

export function appendRecords(file: string, records: unknown[]): void {
  fs.appendFileSync(file, records.map((r) => JSON.stringify(r) + '\n').join(''));
}

/**
 * Claude Code's records of one exchange: the user's prompt (or the results of the tools the
 * previous response called) and the assistant's response, with the usage its API call reported.
 */
export class ClaudeSession {
  private turn = 0;
  private parent: string | null = null;

  constructor(
    readonly file: string,
    readonly cwd: string,
    readonly sessionId = path.basename(file, '.jsonl'),
  ) {}

  private record(type: 'user' | 'assistant', message: Record<string, unknown>): Record<string, unknown> {
    const uuid = `${type[0]}${this.sessionId}-${this.turn}-${Math.random().toString(36).slice(2, 8)}`;
    const rec = {
      type,
      uuid,
      parentUuid: this.parent,
      sessionId: this.sessionId,
      cwd: this.cwd,
      version: '2.0.27',
      timestamp: new Date().toISOString(),
      message,
    };
    this.parent = uuid;
    return rec;
  }

  /** A prompt and a text answer. */
  prompt(text: string, inputTokens: number): void {
    this.ask(text);
    this.answer(text, inputTokens);
  }

  /** The user's prompt alone: the agent has not answered, so nothing names its model yet. */
  ask(text: string): void {
    this.turn++;
    appendRecords(this.file, [this.record('user', { role: 'user', content: text })]);
  }

  /** The answer to the last prompt, naming the model, with the usage its API call reported. */
  answer(text: string, inputTokens: number): void {
    appendRecords(this.file, [
      this.record('assistant', {
        id: `msg_${this.sessionId}_${this.turn}`,
        model: 'claude-sonnet-4-5',
        role: 'assistant',
        type: 'message',
        content: [{ type: 'text', text: `Done: ${text}` }],
        usage: { input_tokens: inputTokens, output_tokens: 10 },
      }),
    ]);
  }

  /**
   * Claude Code compacting its own context: the `compact_boundary` record (a new root, its
   * logical parent the last record) and the summary it continues from.
   */
  compact(preTokens: number, summary: string): void {
    const boundary = `cb${this.sessionId}-${this.turn}`;
    const logicalParent = this.parent;
    this.parent = null;
    appendRecords(this.file, [
      {
        type: 'system',
        subtype: 'compact_boundary',
        uuid: boundary,
        parentUuid: null,
        logicalParentUuid: logicalParent,
        sessionId: this.sessionId,
        cwd: this.cwd,
        timestamp: new Date().toISOString(),
        compactMetadata: { trigger: 'auto', preTokens },
      },
    ]);
    this.parent = boundary;
    appendRecords(this.file, [
      {
        ...this.record('user', { role: 'user', content: `This session is being continued from a previous conversation. ${summary}` }),
        isCompactSummary: true,
      },
    ]);
  }

  /** A response calling `Bash`, then the call's result: `resultTokens` tokens of output. */
  toolCall(command: string, inputTokens: number, resultTokens: number): void {
    this.turn++;
    const callId = `toolu_${this.sessionId}_${this.turn}`;
    appendRecords(this.file, [
      this.record('assistant', {
        id: `msg_${this.sessionId}_${this.turn}`,
        model: 'claude-sonnet-4-5',
        role: 'assistant',
        type: 'message',
        content: [{ type: 'tool_use', id: callId, name: 'Bash', input: { command } }],
        usage: { input_tokens: inputTokens, output_tokens: 20 },
      }),
      this.record('user', {
        role: 'user',
        content: [{ type: 'tool_result', tool_use_id: callId, content: prose(this.turn, resultTokens), is_error: false }],
      }),
    ]);
  }
}
