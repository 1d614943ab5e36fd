// Loads the esbuild bundle (dist/extension.js) the way VS Code would, with a recording stand-in for
// the `vscode` module, and checks what activation wires up: every contributed command, view and
// setting, the status bar item, and a clear error when the daemon cannot be started.

import assert from 'node:assert/strict';
import * as fs from 'node:fs';
import * as path from 'node:path';
import * as os from 'node:os';
import { describe, it } from 'node:test';
import { SETTING_KEYS } from '../src/settings';
import { formatTokens } from '../src/status';
import { Daemon, prose, SOFT_LIMIT } from './daemon';
import { activate, bundle, manifest, root, waitFor } from './host';

describe('activation of the bundle', () => {
  it('registers every contributed command and view and reads every setting', async () => {
    assert.ok(fs.existsSync(bundle), 'bundle first: scripts/test runs esbuild before the tests');
    const recorded = await activate({ serverPath: path.join(root, 'no-such-soba') });
    const contributed = manifest.contributes.commands.map((c: { command: string }) => c.command);
    assert.deepEqual([...recorded.commands].sort(), [...contributed].sort());
    assert.deepEqual([...recorded.trees].sort(), Object.values(manifest.contributes.views).flat().map((v: any) => v.id).sort());
    assert.deepEqual([...new Set(recorded.settings)].sort(), SETTING_KEYS.map((k) => `soba.${k}`).sort());
    assert.deepEqual(recorded.statusItems, ['soba.budget']);
  });

  it('says how to fix a daemon that cannot be started', async () => {
    const missing = path.join(root, 'no-such-soba');
    const recorded = await activate({ serverPath: missing });
    // The language client adds its own generic line; ours says what to do.
    const ours = recorded.errors.filter((e) => e.startsWith('SOBA: could not start'));
    assert.equal(ours.length, 1, JSON.stringify(recorded.errors));
    assert.match(ours[0], /ENOENT/);
    assert.ok(ours[0].startsWith(`SOBA: could not start "${missing} serve": `), ours[0]);
    assert.ok(ours[0].endsWith('Install soba or set "soba.serverPath".'), ours[0]);
  });

  it('sends palette commands to the real daemon through the language client', { timeout: 60_000 }, async () => {
    const bin = process.env.SOBA_BIN ?? path.resolve(root, '..', '..', 'target', 'debug', 'soba');
    assert.ok(fs.existsSync(bin), `no daemon binary at ${bin}: run cargo build --bin soba or set SOBA_BIN`);
    const tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'soba-activation-'));
    const workspace = path.join(tmp, 'workspace');
    fs.mkdirSync(workspace);
    const saved = { ...process.env };
    // The language client starts the daemon with this process's environment.
    Object.assign(process.env, {
      SOBA_DATA_DIR: path.join(tmp, 'data'),
      SOBA_RUNTIME_DIR: path.join(tmp, 'runtime'),
      SOBA_CONFIG: path.join(tmp, 'no-user-config.json'),
    });
    try {
      const settings: Record<string, unknown> = { serverPath: bin, serverArgs: ['--standalone'] };
      await activate(settings, [workspace], async (recorded) => {
        assert.deepEqual(recorded.errors, [], 'the daemon started');
        // No agent opened a session in this workspace: the daemon says so, and the command shows it.
        await recorded.handlers.get('soba.showBudget')!();
        assert.equal(recorded.errors.length, 1, JSON.stringify(recorded.errors));
        assert.match(recorded.errors[0], /^SOBA: .*no active session/);

        // Changing a setting restarts the connection with the new path.
        settings.serverPath = path.join(tmp, 'moved-soba');
        recorded.changeConfiguration('soba');
        await waitFor(() => recorded.errors.some((e) => e.startsWith(`SOBA: could not start "${settings.serverPath} serve --standalone"`)));
      });
    } finally {
      process.env = saved;
      fs.rmSync(tmp, { recursive: true, force: true });
    }
  });

  it('shows an agent session of the shared daemon in the status bar and compacts it', { timeout: 90_000 }, async () => {
    // The agent and the editor each run `soba serve`, which relays to one shared daemon.
    const agent = new Daemon();
    agent.start(['serve']);
    const saved = { ...process.env };
    Object.assign(process.env, agent.env);
    try {
      await agent.initialize();
      const opened = await agent.request('soba/session/open', {
        workspace: agent.workspace,
        create: true,
        model: { contextWindow: 8_000, maxOutputTokens: 1_000 },
      });
      await activate({ serverPath: agent.binary }, [agent.workspace], async (recorded) => {
        assert.deepEqual(recorded.errors, [], 'the editor connected');
        const shows = (text: string) => () => recorded.status.visible && recorded.status.text === text;
        await agent.until('the status bar to show the opened session', shows(`$(dashboard) ${formatTokens(opened.budget.effectiveTokens)} / 7k`));
        await agent.until('the Sessions view to list the session', () =>
          recorded.views.get('soba.sessions')!.getChildren().some((n) => n.label === opened.sessionId && n.description?.startsWith('active')),
        );

        let effective = opened.budget.effectiveTokens;
        for (let i = 1; effective <= SOFT_LIMIT; i++) {
          assert.ok(i < 80, 'appends never got past the soft limit');
          const { budget } = await agent.request('soba/session/append', {
            sessionId: opened.sessionId,
            entries: [{ type: 'message', role: i % 2 ? 'user' : 'assistant', content: [{ type: 'text', text: prose(i, 300) }] }],
          });
          effective = budget.effectiveTokens;
        }
        await agent.until('the warning colour past the soft limit', shows(`$(warning) ${formatTokens(effective)} / 7k`));
        assert.equal(recorded.status.background, 'statusBarItem.warningBackground');

        await recorded.handlers.get('soba.autoCompactOff')!();
        assert.deepEqual(recorded.errors, []);
        assert.ok(recorded.infos.includes('Auto-compact is off for the active session.'), JSON.stringify(recorded.infos));
        await agent.until('the tooltip to say auto-compact is off', () => recorded.status.tooltip.includes('Auto-compact: off'));

        await recorded.handlers.get('soba.compact')!();
        assert.deepEqual(recorded.errors, []);
        await agent.until('the status bar back to normal after the compaction', () => recorded.status.text.startsWith('$(dashboard) '));
        assert.equal(recorded.status.background, undefined);
        assert.equal(recorded.progress.length, 1, 'one progress notification');
        assert.ok(recorded.progress[0].done, 'the progress notification closed');
        const lines = recorded.infos.filter((m) => /^(warning: )?\w+ compact(, degraded \(.*\))?: .* tokens \(−\d+%\), (model, |local, )?ck_/.test(m));
        assert.equal(lines.length, 1, `the completion line is shown once: ${JSON.stringify(recorded.infos)}`);
      });
    } finally {
      process.env = saved;
      await agent.stop();
    }
  });
});
