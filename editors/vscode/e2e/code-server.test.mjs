// The packaged extension in a real VS Code: code-server on 127.0.0.1, driven by headless
// Chromium through puppeteer-core. An agent opens a live session on the workspace; the test reads
// the status bar (text and colour), runs the palette commands and reads the sidebar, saving a
// screenshot at every step into $SOBA_E2E_ARTIFACTS. Last, that session closes and a Claude Code
// transcript of the workspace appears: the status bar shows the followed agent's budget.
//
// Environment (set by scripts/test-code-server): CODE_SERVER (the executable), SOBA_VSIX,
// SOBA_BIN, CHROMIUM, SOBA_E2E_ARTIFACTS.

import assert from 'node:assert/strict';
import { spawn, spawnSync } from 'node:child_process';
import * as fs from 'node:fs';
import * as net from 'node:net';
import * as os from 'node:os';
import * as path from 'node:path';
import { after, before, test } from 'node:test';
import puppeteer from 'puppeteer-core';
import { Agent } from './agent.mjs';

const need = (name) => {
  const value = process.env[name];
  assert.ok(value, `${name} is not set: run editors/vscode/scripts/test-code-server`);
  return value;
};
const CODE_SERVER = need('CODE_SERVER');
const VSIX = need('SOBA_VSIX');
const SOBA_BIN = need('SOBA_BIN');
const CHROMIUM = need('CHROMIUM');
const ARTIFACTS = need('SOBA_E2E_ARTIFACTS');
const WAIT_MS = 60_000;

const tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'soba-code-server-'));
const mk = (...parts) => {
  const dir = path.join(tmp, ...parts);
  fs.mkdirSync(dir, { recursive: true, mode: 0o700 });
  return dir;
};
const workspace = fs.realpathSync(mk('workspace'));
const env = {
  SOBA_DATA_DIR: mk('data'),
  SOBA_RUNTIME_DIR: mk('runtime'),
  SOBA_CONFIG: path.join(tmp, 'no-user-config.json'),
  XDG_CONFIG_HOME: mk('config'),
  XDG_DATA_HOME: mk('xdg-data'),
  SOBA_DAEMON_IDLE_SECS: '5',
  // The agents' homes: the daemon finds a running agent's transcript here, never in the real ones.
  CLAUDE_CONFIG_DIR: mk('claude'),
  CODEX_HOME: mk('codex'),
  PI_CODING_AGENT_DIR: mk('pi'),
};
const userDataDir = mk('user-data');
const extensionsDir = mk('extensions');
const exportPath = path.join(workspace, 'hand-off.capsule.md');

let agent;
let codeServer;
let codeServerLog = '';
let browser;
let page;
let shot = 0;

function freePort() {
  return new Promise((resolve, reject) => {
    const server = net.createServer();
    server.once('error', reject);
    server.listen(0, '127.0.0.1', () => {
      const { port } = server.address();
      server.close(() => resolve(port));
    });
  });
}

async function screenshot(name) {
  shot += 1;
  const file = path.join(ARTIFACTS, `${String(shot).padStart(2, '0')}-${name}.png`);
  await page.screenshot({ path: file });
  return file;
}

async function until(what, check, timeout = WAIT_MS) {
  const deadline = Date.now() + timeout;
  let last;
  for (;;) {
    try {
      last = await check();
      if (last) return last;
    } catch (err) {
      last = err;
    }
    if (Date.now() > deadline) {
      await screenshot(`timeout-${what.replace(/[^a-z0-9]+/gi, '-').slice(0, 40)}`).catch(() => undefined);
      assert.fail(`timed out waiting for ${what} (last: ${last}); code-server log:\n${codeServerLog.slice(-3000)}\nagent stderr:\n${agent?.stderr.slice(-2000)}`);
    }
    await new Promise((r) => setTimeout(r, 250));
  }
}

/** The SOBA status bar item: its text and computed background colour. */
async function statusItem() {
  return page.evaluate(() => {
    const item = document.querySelector('.statusbar-item[id*="soba.budget"]');
    if (!item || item.offsetParent === null) return undefined;
    return {
      text: item.innerText.trim(),
      aria: item.querySelector('a')?.getAttribute('aria-label') ?? item.getAttribute('aria-label') ?? '',
      background: getComputedStyle(item).backgroundColor,
      warningBackground: getComputedStyle(document.querySelector('.monaco-workbench')).getPropertyValue('--vscode-statusBarItem-warningBackground').trim(),
    };
  });
}

/** Texts of the visible notification toasts. */
async function notifications() {
  return page.evaluate(() => [...document.querySelectorAll('.notification-toast .notification-list-item-message')].map((e) => e.innerText.trim()));
}

async function notificationMatching(what, pattern) {
  return until(what, async () => (await notifications()).find((text) => pattern.test(text)));
}

async function clearNotifications() {
  await page.evaluate(() => {
    for (const b of document.querySelectorAll('.notification-toast .codicon-notifications-clear, .notification-toast .codicon-close')) b.click();
  });
  await until('the notifications to close', async () => (await notifications()).length === 0, 10_000).catch(() => undefined);
}

/** Runs a palette command by its title, as a user would: F1, type, Enter. */
async function palette(title) {
  await page.keyboard.press('Escape');
  await page.keyboard.press('F1');
  await page.waitForSelector('.quick-input-widget .quick-input-box input', { visible: true });
  await page.keyboard.type(title);
  await until(`"${title}" in the palette`, () =>
    page.evaluate((wanted) => [...document.querySelectorAll('.quick-input-list .monaco-list-row')].some((row) => row.innerText.includes(wanted)), title),
  );
  await page.keyboard.press('Enter');
}

/** Waits for a quick input (input box or pick list) whose prompt or title matches. */
async function quickInput(pattern) {
  return until(`a quick input matching ${pattern}`, () =>
    page.evaluate((source) => {
      const widget = document.querySelector('.quick-input-widget');
      if (!widget || widget.style.display === 'none') return false;
      const input = widget.querySelector('input');
      const text = `${widget.innerText}\n${input?.placeholder ?? ''}\n${input?.value ?? ''}`;
      return new RegExp(source).test(text) ? text : false;
    }, pattern.source),
  );
}

/** A CSS colour as the browser computes it (`rgb(…)`), to compare with computed styles. */
async function cssColor(css) {
  return page.evaluate((value) => {
    const el = document.createElement('div');
    el.style.backgroundColor = value;
    document.body.appendChild(el);
    const rgb = getComputedStyle(el).backgroundColor;
    el.remove();
    return rgb;
  }, css);
}

async function paletteTitles(prefix) {
  await page.keyboard.press('Escape');
  await page.keyboard.press('F1');
  await page.waitForSelector('.quick-input-widget .quick-input-box input', { visible: true });
  await page.keyboard.type(prefix);
  await new Promise((r) => setTimeout(r, 800));
  const titles = await page.evaluate(() => [...document.querySelectorAll('.quick-input-list .monaco-list-row')].map((row) => row.getAttribute('aria-label') ?? row.innerText));
  await page.keyboard.press('Escape');
  return titles;
}

before(async () => {
  fs.mkdirSync(ARTIFACTS, { recursive: true });
  fs.mkdirSync(path.join(workspace, '.soba'), { recursive: true });
  fs.writeFileSync(
    path.join(workspace, '.soba', 'config.json'),
    JSON.stringify({ compaction: { keepRecentTokens: 600, safetyReserveTokens: 0, minTokensForAutoCompact: 1000, auto: false } }),
  );
  fs.writeFileSync(path.join(workspace, 'README.md'), '# A workspace with a live SOBA session\n');

  const installed = spawnSync(CODE_SERVER, ['--user-data-dir', userDataDir, '--extensions-dir', extensionsDir, '--install-extension', VSIX], {
    encoding: 'utf8',
    timeout: 120_000,
  });
  assert.equal(installed.status, 0, `code-server --install-extension failed:\n${installed.stdout}\n${installed.stderr}`);

  // The extension host finds soba through the setting here; the lookup itself is unit-tested.
  fs.mkdirSync(path.join(userDataDir, 'User'), { recursive: true });
  fs.writeFileSync(
    path.join(userDataDir, 'User', 'settings.json'),
    JSON.stringify({
      'soba.serverPath': SOBA_BIN,
      'workbench.startupEditor': 'none',
      'security.workspace.trust.enabled': false,
      'workbench.tips.enabled': false,
      'extensions.ignoreRecommendations': true,
      'telemetry.telemetryLevel': 'off',
      'workbench.colorTheme': 'Default Dark Modern',
    }),
  );

  agent = new Agent(SOBA_BIN, env, workspace);
  await agent.initialize();
  // Past the soft limit (5.6k of 7k): the status bar shows the warning colour.
  agent.session = await agent.openFilled({ contextWindow: 8_000, maxOutputTokens: 1_000 }, 5_800);

  const port = await freePort();
  codeServer = spawn(
    CODE_SERVER,
    [
      '--auth', 'none',
      '--bind-addr', `127.0.0.1:${port}`,
      '--user-data-dir', userDataDir,
      '--extensions-dir', extensionsDir,
      '--disable-telemetry',
      '--disable-update-check',
      '--disable-workspace-trust',
      '--disable-getting-started-override',
      workspace,
    ],
    { env: { ...process.env, ...env }, stdio: ['ignore', 'pipe', 'pipe'] },
  );
  codeServer.stdout.on('data', (c) => (codeServerLog += c));
  codeServer.stderr.on('data', (c) => (codeServerLog += c));
  await until('code-server to listen', () => codeServerLog.includes('HTTP server listening'));

  browser = await puppeteer.launch({
    executablePath: CHROMIUM,
    headless: true,
    args: ['--no-sandbox', '--disable-gpu', '--disable-dev-shm-usage', '--window-size=1400,900'],
    defaultViewport: { width: 1400, height: 900 },
  });
  page = await browser.newPage();
  await page.goto(`http://127.0.0.1:${port}/?folder=${encodeURIComponent(workspace)}`, { waitUntil: 'domcontentloaded' });
  await page.waitForSelector('.monaco-workbench', { timeout: WAIT_MS });
});

after(async () => {
  await browser?.close().catch(() => undefined);
  codeServer?.kill('SIGTERM');
  await agent?.stop();
  fs.rmSync(tmp, { recursive: true, force: true });
  console.log(`screenshots: ${ARTIFACTS}`);
});

test('the status bar shows the live session with the warning colour past the soft limit', async () => {
  const item = await until('the SOBA status bar item', statusItem);
  await screenshot('status-bar');
  const shown = `${(agent.session.budget.effectiveTokens / 1000).toFixed(1).replace(/\.0$/, '')}k / 7k`;
  assert.ok(item.text.includes(shown), `status bar text ${JSON.stringify(item.text)} shows ${shown}`);
  assert.ok(item.warningBackground, 'the theme defines the warning colour');
  assert.equal(item.background, await cssColor(item.warningBackground), 'the item has the warning background');
});

test('the tooltip gives the percent left until auto-compact', async () => {
  await until('the SOBA status bar item', statusItem);
  await page.hover('.statusbar-item[id*="soba.budget"]');
  const hover = await until('the status bar tooltip', () =>
    page.evaluate(() => [...document.querySelectorAll('.monaco-hover, .workbench-hover, .custom-hover')].map((e) => e.innerText).find((t) => t.includes('SOBA'))),
  );
  await screenshot('status-bar-tooltip');
  assert.match(hover, /Soft limit: 5\.6k/);
  assert.match(hover, /Auto-compact: off, past the soft limit/);
  await page.mouse.move(700, 400);
});

test('the palette offers only the applicable auto-compact command', async () => {
  const titles = await paletteTitles('SOBA: Turn Auto-Compact');
  await screenshot('palette-auto-compact');
  assert.ok(titles.some((t) => /Turn Auto-Compact On/.test(t)), `On is offered: ${titles}`);
  assert.ok(!titles.some((t) => /Turn Auto-Compact Off/.test(t)), `Off is hidden while auto-compact is off: ${titles}`);
});

test('SOBA: Show Budget shows the budget line', async () => {
  await palette('SOBA: Show Budget');
  const line = await notificationMatching('the budget notification', /Context budget: .* tokens/);
  await screenshot('show-budget');
  assert.match(line, /soft limit 5\.6k/);
  await clearNotifications();
});

test('SOBA: Turn Auto-Compact On turns it on, and the palette then offers Off', async () => {
  await palette('SOBA: Turn Auto-Compact On');
  await notificationMatching('the auto-compact notification', /Auto-compact is on/);
  await screenshot('auto-compact-on');
  await clearNotifications();
  const titles = await until('the palette to offer Off', async () => {
    const t = await paletteTitles('SOBA: Turn Auto-Compact');
    return t.some((x) => /Off/.test(x)) && !t.some((x) => /Turn Auto-Compact On/.test(x)) ? t : undefined;
  });
  assert.ok(titles.length > 0);
  await palette('SOBA: Turn Auto-Compact Off');
  await notificationMatching('the auto-compact notification', /Auto-compact is off/);
  await clearNotifications();
});

test('SOBA: Compact Context compacts the live session', async () => {
  await palette('SOBA: Compact Context');
  await quickInput(/Optional instructions|Compact the context/);
  await page.keyboard.type('keep the parser notes');
  await page.keyboard.press('Enter');
  const line = await notificationMatching('the completion line', /compact: .* → .* tokens/);
  await screenshot('compacted');
  assert.match(line, /ck_/);
  await clearNotifications();
  const item = await until('the status bar to drop below the soft limit', async () => {
    const s = await statusItem();
    return s && s.background !== (await cssColor(s.warningBackground)) ? s : undefined;
  });
  await screenshot('status-bar-after-compact');
  assert.match(item.text, / \/ 7k/);
});

test('SOBA: Create Capsule… creates a titled checkpoint', async () => {
  await palette('SOBA: Create Capsule');
  await quickInput(/Capsule title/);
  await page.keyboard.type('Parser hand-off');
  await page.keyboard.press('Enter');
  await notificationMatching('the capsule notification', /Capsule "Parser hand-off" created: ck_/);
  await screenshot('capsule-created');
  await clearNotifications();
});

test('SOBA: Export Capsule… writes a Portable Capsule to the chosen file', async () => {
  await palette('SOBA: Export Capsule');
  await quickInput(/Checkpoint to export/);
  await until('the checkpoint list', () => page.evaluate(() => document.querySelectorAll('.quick-input-list .monaco-list-row').length > 0));
  await screenshot('export-pick');
  await page.keyboard.press('Enter');
  // code-server's save dialog is the simple, quick-input one: replace the path and accept.
  await quickInput(/Export Capsule|Save As|capsule\.md/i);
  await page.focus('.quick-input-widget .quick-input-box input');
  await page.keyboard.down('Control');
  await page.keyboard.press('KeyA');
  await page.keyboard.up('Control');
  await page.keyboard.type(exportPath);
  await screenshot('export-save');
  await page.keyboard.press('Enter');
  await notificationMatching('the export notification', /exported to/);
  await screenshot('exported');
  const text = fs.readFileSync(exportPath, 'utf8');
  assert.match(text, /^---/);
  assert.match(text, /Parser hand-off/);
  await clearNotifications();
});

test('SOBA: Show Context opens what fills the window, by part', async () => {
  await palette('SOBA: Show Context');
  const text = await until('the context document', () =>
    page.evaluate(() =>
      [...document.querySelectorAll('.monaco-editor .view-lines')]
        .map((e) => e.innerText.replace(/\u00a0/g, ' '))
        .find((t) => t.includes('Context of session')),
    ),
  );
  await screenshot('show-context');
  // The editor renders only the lines on screen: the top of the document.
  assert.match(text, /By part/);
  // A capsule is in the window (its size follows the builder, so any non-zero count).
  assert.match(text, /Capsule \| [1-9][\d.]*k? \| \d+% \|/);
});

test('the sidebar lists the session, its budget, compactions and capsules', async () => {
  await page.click('.activitybar .action-item a[aria-label^="SOBA"]').catch(async () => {
    await palette('View: Show SOBA');
  });
  const rows = await until('the SOBA views to fill', async () => {
    const texts = await page.evaluate(() => [...document.querySelectorAll('.sidebar .monaco-list-row')].map((r) => r.innerText.replace(/\s+/g, ' ').trim()));
    // A completed compaction is listed by its capsule's quality (model, local, degraded).
    return texts.some((t) => t.includes('Parser hand-off')) && texts.some((t) => /(model|local|degraded|completed) · |manual/.test(t)) ? texts : undefined;
  });
  await screenshot('sidebar');
  assert.ok(rows.some((t) => t.includes(agent.session.sessionId.slice(0, 8))), `a row names the session: ${rows.join(' | ')}`);
});

/** One prompt and answer in Claude Code's transcript format, with its API call's usage. */
/** About seven tokens of text, repeated where an exchange must explain its reported growth. */
const FILLER = 'the parser reads exponents now. ';

/**
 * One Claude Code exchange: a request and the answer that reports `inputTokens`. `request`
 * carries what made the reported input grow since the last exchange: SOBA adds an allowance
 * for growth its log cannot explain, so a report that grows by thousands of tokens over a
 * one-line request would (rightly) read higher than the report.
 */
function claudeExchange(cwd, turn, inputTokens, request = `request ${turn}`) {
  const user = { type: 'user', uuid: `u${turn}`, parentUuid: turn ? `a${turn - 1}` : null, sessionId: 'e2e0c1', cwd, timestamp: new Date().toISOString(), message: { role: 'user', content: request } };
  const assistant = {
    type: 'assistant', uuid: `a${turn}`, parentUuid: `u${turn}`, sessionId: 'e2e0c1', cwd, timestamp: new Date().toISOString(),
    message: { id: `msg_${turn}`, model: 'claude-sonnet-4-5', role: 'assistant', type: 'message', content: [{ type: 'text', text: `answer ${turn}` }], usage: { input_tokens: inputTokens, output_tokens: 10 } },
  };
  return `${JSON.stringify(user)}\n${JSON.stringify(assistant)}\n`;
}

test('a Claude Code running in the workspace shows its budget once the SOBA session is gone', async () => {
  await page.keyboard.press('Escape');
  await agent.request('soba/session/close', { sessionId: agent.session.sessionId });
  // No session left in the workspace: the item says the extension is connected and waits for one.
  await until('the idle state', async () => {
    const s = await statusItem();
    return s && s.text.endsWith('SOBA: no agent session') ? s : undefined;
  });
  await screenshot('no-session');

  // Claude Code's project folder: the workspace path with every non-alphanumeric character as `-`.
  const project = mk('claude', 'projects', workspace.replace(/[^A-Za-z0-9]/g, '-'));
  const transcript = path.join(project, 'e2e0c1.jsonl');
  // Claude Code has written the user's prompt, not its first response: nothing names its model.
  const [prompt, response] = claudeExchange(workspace, 0, 42_000).split(/(?<=\n)/);
  fs.writeFileSync(transcript, prompt);
  // The extension asks again every few seconds while it shows nothing; the daemon then follows it.
  const early = await until('the transcript followed before its first response', async () => {
    const s = await statusItem();
    return s && /model not known yet$/.test(s.text) ? s : undefined;
  });
  await screenshot('followed-before-first-response');
  assert.doesNotMatch(early.text, / \/ /, 'no limits before the model is known, and none of another model');
  fs.appendFileSync(transcript, response);
  const item = await until('the followed transcript\'s budget', async () => {
    const s = await statusItem();
    return s && /\b42k \/ \d/.test(s.text) ? s : undefined;
  });
  await screenshot('followed-claude-code');
  assert.match(item.aria || item.text, /42k/);

  // 19.5k more tokens reported: the request pasted a long log (over 20k tokens of it).
  fs.appendFileSync(transcript, claudeExchange(workspace, 1, 61_500, `request 1: ${FILLER.repeat(3_000)}`));
  await until('the budget to follow the next response', async () => {
    const s = await statusItem();
    return s && /\b61\.5k \/ \d/.test(s.text) ? s : undefined;
  });
  await screenshot('followed-claude-code-grown');
});

/** Texts of the editor tabs, in every group. */
async function tabs() {
  return page.evaluate(() => [...document.querySelectorAll('.tabs-container .tab')].map((t) => t.innerText.trim()));
}

test('for the Claude Code SOBA follows, the tooltip says who compacts and Compact Context previews', async () => {
  // A long answer before the latest exchange: history SOBA could fold into a capsule.
  const project = path.join(tmp, 'claude', 'projects', workspace.replace(/[^A-Za-z0-9]/g, '-'));
  const transcript = path.join(project, 'e2e0c1.jsonl');
  const long = claudeExchange(workspace, 2, 63_000, `request 2: ${FILLER.repeat(300)}`).replace('answer 2', `answer 2: ${FILLER.repeat(300)}`);
  fs.appendFileSync(transcript, long + claudeExchange(workspace, 3, 64_000));
  await until('the budget of the last response', async () => {
    const s = await statusItem();
    return s && /\b64k \/ \d/.test(s.text) ? s : undefined;
  });
  await page.mouse.move(700, 400);
  await page.hover('.statusbar-item[id*="soba.budget"]');
  const hover = await until('the status bar tooltip', () =>
    page.evaluate(() =>
      [...document.querySelectorAll('.monaco-hover, .workbench-hover, .custom-hover')].map((e) => e.innerText).find((t) => t.includes('SOBA context budget')),
    ),
  );
  await screenshot('followed-tooltip');
  assert.match(hover, /Claude Code compacts this session itself; SOBA follows it\./);
  assert.doesNotMatch(hover, /compacts before the next response/);
  // The bar stands against the agent's own threshold; SOBA's hard limit is named as SOBA's.
  assert.match(hover, /Claude Code compacts at ~167\.0k \(claude-sonnet-4-5\); SOBA's hard limit \d/);
  assert.match((await statusItem()).text, /\b64k \/ 167k$/);
  await page.mouse.move(700, 400);

  await palette('SOBA: Compact Context');
  await quickInput(/Preview what SOBA would send/);
  await page.keyboard.press('Enter');
  const text = await until('the preview document', () =>
    page.evaluate(() =>
      [...document.querySelectorAll('.monaco-editor .view-lines')]
        .map((e) => e.innerText.replace(/\u00a0/g, ' '))
        .find((t) => t.includes('What SOBA would send')),
    ),
  );
  await screenshot('followed-compact-preview');
  assert.match(text, /Preview: nothing was changed/);
  assert.deepEqual(await notifications(), [], 'no success toast for a compaction the agent never sees');
  const item = await statusItem();
  assert.match(item.text, /\b64k \//, 'the budget is unchanged');

  // Show Context twice: one read-only tab, reused, beside the preview.
  await palette('SOBA: Show Context');
  await until('the context tab', async () => ((await tabs()).some((t) => t.includes('SOBA Context')) ? true : undefined));
  await palette('SOBA: Show Context');
  await new Promise((r) => setTimeout(r, 1500));
  const open = await tabs();
  await screenshot('followed-show-context');
  assert.equal(open.filter((t) => t.includes('SOBA Context')).length, 1, `one context tab: ${open.join(' | ')}`);
  assert.ok(!open.some((t) => /Untitled/.test(t)), `no Untitled document: ${open.join(' | ')}`);
});

test("Claude Code's own compaction is the last compaction, and View Current Capsule shows its summary", async () => {
  await page.keyboard.press('Escape');
  const project = path.join(tmp, 'claude', 'projects', workspace.replace(/[^A-Za-z0-9]/g, '-'));
  const transcript = path.join(project, 'e2e0c1.jsonl');
  const now = new Date().toISOString();
  const boundary = { type: 'system', subtype: 'compact_boundary', uuid: 'cb', parentUuid: null, logicalParentUuid: 'a3', sessionId: 'e2e0c1', cwd: workspace, timestamp: now, compactMetadata: { trigger: 'auto', preTokens: 64_000 } };
  const summary = {
    type: 'user', uuid: 'cs', parentUuid: 'cb', sessionId: 'e2e0c1', cwd: workspace, timestamp: now, isCompactSummary: true,
    message: { role: 'user', content: 'This session is being continued from a previous conversation. The e2e parser work is done.' },
  };
  const next = claudeExchange(workspace, 4, 9_000).replace('"parentUuid":"a3"', '"parentUuid":"cs"');
  fs.appendFileSync(transcript, `${JSON.stringify(boundary)}\n${JSON.stringify(summary)}\n${next}`);
  await until('the budget after the compaction', async () => {
    const s = await statusItem();
    return s && /\b9k \/ 167k$/.test(s.text) ? s : undefined;
  });
  await page.mouse.move(700, 400);
  await page.hover('.statusbar-item[id*="soba.budget"]');
  const hover = await until("the tooltip naming Claude Code's own compaction", () =>
    page.evaluate(() =>
      [...document.querySelectorAll('.monaco-hover, .workbench-hover, .custom-hover')]
        .map((e) => e.innerText)
        .find((t) => t.includes("Last compaction: Claude Code's own (auto): 64k → summary")),
    ),
  );
  await screenshot('followed-own-compaction-tooltip');
  assert.doesNotMatch(hover, /Last compaction: none yet/);
  await page.mouse.move(700, 400);

  await palette('SOBA: View Current Capsule');
  const text = await until('the capsule document', () =>
    page.evaluate(() =>
      [...document.querySelectorAll('.monaco-editor .view-lines')]
        // Long lines wrap in the editor: one space for every run of white space.
        .map((e) => e.innerText.replace(/\s+/g, ' '))
        .find((t) => t.includes('The e2e parser work is done.')),
    ),
  );
  await screenshot('followed-own-compaction-capsule');
  assert.match(text, /Claude Code's own compaction summary \(auto, /);
});
