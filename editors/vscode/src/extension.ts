// The thin VS Code adapter: starts `soba serve` through vscode-languageclient and turns the pure
// modules' values into a status bar item, progress notifications, tree views and dialogs.

import * as fs from 'node:fs';
import * as os from 'node:os';
import * as vscode from 'vscode';
import { LanguageClient, type LanguageClientOptions, type ServerOptions } from 'vscode-languageclient/node';
import { commandHandlers, type CommandContext, type EditorUi, type SobaDocument } from './commands';
import {
  BUDGET_CHANGED,
  COMPACTION,
  SESSION_CLOSED,
  SHOW_MESSAGE,
  type BudgetReport,
  type CompactionNotification,
  type SessionClosedNotification,
  type SessionTarget,
  type SobaRequester,
} from './protocol';
import { findServer, readSettings, serverCommand, type Settings } from './settings';
import {
  backgroundColorId,
  BUDGET_RETRY_MS,
  BudgetTracker,
  CompactionLog,
  CompactionProgress,
  IDLE_TEXT,
  idleTooltipLines,
  severity,
  statusBarText,
  tooltipLines,
  type ProgressAction,
} from './status';
import { budgetNodes, capsuleNodes, compactionNodes, sessionNodes, VIEW_IDS, type TreeNode } from './views';

let extension: SobaExtension | undefined;

export async function activate(context: vscode.ExtensionContext): Promise<void> {
  extension = new SobaExtension(context);
  await extension.start();
}

export async function deactivate(): Promise<void> {
  await extension?.stop();
  extension = undefined;
}

function currentSettings(): Settings {
  const config = vscode.workspace.getConfiguration('soba');
  return readSettings((key) => config.get(key), {
    // Older hosts without workspace trust treat every workspace as trusted.
    trusted: vscode.workspace.isTrusted !== false,
    userValue: (key) => config.inspect(key)?.globalValue,
  });
}

function realFolderPaths(): string[] {
  return (vscode.workspace.workspaceFolders ?? []).map((folder) => {
    try {
      return fs.realpathSync(folder.uri.fsPath);
    } catch {
      return folder.uri.fsPath;
    }
  });
}

class NodeProvider implements vscode.TreeDataProvider<TreeNode> {
  private nodes: TreeNode[] = [];
  private readonly changed = new vscode.EventEmitter<void>();
  readonly onDidChangeTreeData = this.changed.event;

  set(nodes: TreeNode[]): void {
    this.nodes = nodes;
    this.changed.fire();
  }

  getChildren(element?: TreeNode): TreeNode[] {
    return element ? [] : this.nodes;
  }

  getTreeItem(node: TreeNode): vscode.TreeItem {
    const item = new vscode.TreeItem(node.label, vscode.TreeItemCollapsibleState.None);
    item.id = node.id;
    item.description = node.description;
    item.tooltip = node.tooltip;
    item.contextValue = node.contextValue;
    if (node.icon) item.iconPath = new vscode.ThemeIcon(node.icon);
    if (node.command) item.command = { command: node.command, title: node.label, arguments: [node] };
    return item;
  }
}

/**
 * SOBA's views as read-only `soba:` documents: never an unsaved Untitled buffer, one document
 * per view, its content replaced when the view is shown again.
 */
class SobaDocuments implements vscode.TextDocumentContentProvider {
  static readonly scheme = 'soba';
  private readonly contents = new Map<string, string>();
  private readonly changed = new vscode.EventEmitter<vscode.Uri>();
  readonly onDidChange = this.changed.event;

  static uri(name: SobaDocument): vscode.Uri {
    const titles: Record<SobaDocument, string> = {
      context: 'SOBA Context.md',
      capsule: 'SOBA Capsule.md',
      preview: 'What SOBA Would Send (preview).md',
    };
    return vscode.Uri.from({ scheme: SobaDocuments.scheme, path: `/${titles[name]}` });
  }

  provideTextDocumentContent(uri: vscode.Uri): string {
    return this.contents.get(uri.toString()) ?? '';
  }

  async show(name: SobaDocument, content: string): Promise<void> {
    const uri = SobaDocuments.uri(name);
    this.contents.set(uri.toString(), content);
    this.changed.fire(uri);
    // In the group that already shows this view, else one showing another SOBA view, else
    // beside the editor: SOBA's views stay together in one group. The `.md` name makes them
    // Markdown.
    const showing = (test: (other: vscode.Uri) => boolean) =>
      vscode.window.tabGroups.all.find((group) =>
        group.tabs.some((tab) => tab.input instanceof vscode.TabInputText && test(tab.input.uri)),
      );
    const group =
      showing((other) => other.toString() === uri.toString()) ?? showing((other) => other.scheme === SobaDocuments.scheme);
    const doc = await vscode.workspace.openTextDocument(uri);
    await vscode.window.showTextDocument(doc, { preview: true, viewColumn: group?.viewColumn ?? vscode.ViewColumn.Beside });
  }
}

class SobaExtension {
  private client: LanguageClient | undefined;
  private readonly output = vscode.window.createOutputChannel('SOBA');
  private readonly flightOutput = vscode.window.createOutputChannel('SOBA Flight Records');
  private readonly statusItem = vscode.window.createStatusBarItem('soba.budget', vscode.StatusBarAlignment.Right, 100);
  private readonly tracker = new BudgetTracker(realFolderPaths);
  private readonly progress = new CompactionProgress();
  private readonly compactionLog = new CompactionLog();
  private readonly running = new Map<string, { report: vscode.Progress<{ increment?: number; message?: string }>; done: () => void }>();
  private readonly views = {
    sessions: new NodeProvider(),
    budget: new NodeProvider(),
    compactions: new NodeProvider(),
    capsules: new NodeProvider(),
  };
  private settings: Settings = currentSettings();
  private budgetRetry: ReturnType<typeof setInterval> | undefined;
  private askingBudget = false;
  private lastBudgetMiss: string | undefined;

  constructor(context: vscode.ExtensionContext) {
    this.statusItem.name = 'SOBA context budget';
    this.statusItem.command = 'soba.showBudget';
    const documents = new SobaDocuments();
    const ctx: CommandContext = {
      ui: vscodeUi(this.flightOutput, documents),
      client: () => this.requester(),
      target: () => this.target(),
      settings: () => this.settings,
      progress: this.progress,
      refresh: () => void this.refreshViews(),
      shownBudget: () => this.tracker.report,
    };
    context.subscriptions.push(
      this.output,
      this.flightOutput,
      this.statusItem,
      vscode.workspace.registerTextDocumentContentProvider(SobaDocuments.scheme, documents),
      ...Object.entries(commandHandlers(ctx)).map(([id, handler]) => vscode.commands.registerCommand(id, handler)),
      vscode.window.registerTreeDataProvider(VIEW_IDS.sessions, this.views.sessions),
      vscode.window.registerTreeDataProvider(VIEW_IDS.budget, this.views.budget),
      vscode.window.registerTreeDataProvider(VIEW_IDS.compactions, this.views.compactions),
      vscode.window.registerTreeDataProvider(VIEW_IDS.capsules, this.views.capsules),
      vscode.workspace.onDidChangeConfiguration((event) => {
        if (event.affectsConfiguration('soba')) void this.restart();
      }),
      vscode.workspace.onDidChangeWorkspaceFolders(() => void this.refreshBudget()),
    );
  }

  private requester(): SobaRequester | undefined {
    const client = this.client;
    if (!client || !client.isRunning()) return undefined;
    return { request: (method, params) => client.sendRequest(method, params) };
  }

  private target(): SessionTarget {
    const active = vscode.window.activeTextEditor?.document.uri;
    const folder = (active && vscode.workspace.getWorkspaceFolder(active)) ?? vscode.workspace.workspaceFolders?.[0];
    return folder ? { workspace: folder.uri.fsPath } : {};
  }

  async start(): Promise<void> {
    this.settings = currentSettings();
    const server = findServer(this.settings, {
      path: process.env.PATH,
      home: os.homedir(),
      workspaceFolders: realFolderPaths(),
      isExecutable: (file) => {
        try {
          fs.accessSync(file, fs.constants.X_OK);
          return fs.statSync(file).isFile();
        } catch {
          return false;
        }
      },
    });
    if ('error' in server) {
      this.statusItem.hide();
      void vscode.window.showErrorMessage(`SOBA: ${server.error}`, 'Open Settings').then((choice) => {
        if (choice) void vscode.commands.executeCommand('workbench.action.openSettings', 'soba.serverPath');
      });
      return;
    }
    const { command, args } = serverCommand(this.settings, server.path);
    const serverOptions: ServerOptions = { command, args };
    const clientOptions: LanguageClientOptions = {
      documentSelector: [],
      outputChannel: this.output,
    };
    const client = new LanguageClient('soba', 'SOBA', serverOptions, clientOptions);
    client.onNotification(BUDGET_CHANGED, (report: BudgetReport) => {
      if (this.tracker.accept(report)) this.renderStatus();
      void this.refreshViews();
    });
    client.onNotification(COMPACTION, (event: CompactionNotification) => {
      const logged = this.compactionLog.ended(event, new Date());
      if (logged) this.output.appendLine(`compaction: ${logged}`);
      for (const action of this.progress.handle(event)) this.showProgress(action);
    });
    // Replaces the language client's own handler: the daemon's warning after a compaction that
    // fell back repeats what its result line says, so it is logged, not shown a second time.
    client.onNotification(SHOW_MESSAGE, (message: { type: number; message: string }) => {
      this.output.appendLine(`daemon: ${message.message}`);
      if (this.progress.absorbs(message.message)) return;
      if (message.type === 1) void vscode.window.showErrorMessage(message.message);
      else if (message.type === 2) void vscode.window.showWarningMessage(message.message);
      else void vscode.window.showInformationMessage(message.message);
    });
    client.onNotification(SESSION_CLOSED, (closed: SessionClosedNotification) => {
      // The bar moves to the workspace's next active session, or hides when there is none.
      if (this.tracker.forget(closed.sessionId)) this.renderStatus();
      void this.refreshBudget();
    });
    this.client = client;
    try {
      await client.start();
    } catch (err) {
      this.client = undefined;
      this.statusItem.hide();
      const message = err instanceof Error ? err.message : String(err);
      void vscode.window.showErrorMessage(
        `SOBA: could not start "${command} ${args.join(' ')}": ${message}. Install soba or set "soba.serverPath".`,
      );
      return;
    }
    await this.refreshBudget();
    // No agent in the workspace yet, or its session closed: keep asking, quietly.
    this.budgetRetry = setInterval(() => {
      if (!this.tracker.report) void this.refreshBudget();
    }, BUDGET_RETRY_MS);
  }

  async stop(): Promise<void> {
    const client = this.client;
    this.client = undefined;
    if (this.budgetRetry) clearInterval(this.budgetRetry);
    this.budgetRetry = undefined;
    for (const run of this.running.values()) run.done();
    this.running.clear();
    if (client) await client.stop().catch(() => undefined);
  }

  private async restart(): Promise<void> {
    await this.stop();
    this.tracker.clear();
    this.renderStatus();
    await this.start();
  }

  private async refreshBudget(): Promise<void> {
    const client = this.requester();
    if (!client || this.askingBudget) return;
    this.askingBudget = true;
    try {
      const report = await client.request('soba/budget', this.target());
      this.lastBudgetMiss = undefined;
      if (this.tracker.accept(report)) this.renderStatus();
    } catch (err) {
      // No session to show: the idle state, once the client is up.
      if (!this.tracker.report) this.renderStatus();
      // A workspace without sessions yet: the bar stays hidden until an agent opens one. The
      // retry asks every few seconds; the output says why once, not every time.
      const message = err instanceof Error ? err.message : String(err);
      if (message !== this.lastBudgetMiss) this.output.appendLine(`budget: ${message}`);
      this.lastBudgetMiss = message;
    } finally {
      this.askingBudget = false;
    }
    await this.refreshViews();
  }

  private renderStatus(): void {
    const report = this.tracker.report;
    this.views.budget.set(budgetNodes(report));
    // The palette offers only the auto-compact command that changes something (package.json `when`).
    void vscode.commands.executeCommand('setContext', 'soba.hasSession', report !== undefined);
    void vscode.commands.executeCommand('setContext', 'soba.autoCompact', report?.autoCompact ?? false);
    // A followed agent compacts its session itself: auto-compact is not SOBA's to toggle there.
    void vscode.commands.executeCommand('setContext', 'soba.followed', report?.control?.compactedBy === 'agent');
    this.renderCompacting();
    if (!this.settings.statusBarEnabled || (!report && !this.requester())) {
      this.statusItem.hide();
      return;
    }
    if (!report) {
      // Connected, no agent yet: say so, so that a newcomer sees the extension works.
      this.statusItem.text = IDLE_TEXT;
      this.statusItem.tooltip = idleTooltipLines().join('\n');
      this.statusItem.backgroundColor = undefined;
      this.statusItem.command = undefined;
      this.statusItem.show();
      return;
    }
    this.statusItem.command = 'soba.showBudget';
    this.statusItem.text = statusBarText(report);
    this.statusItem.tooltip = tooltipLines(report, new Date()).join('\n');
    const color = backgroundColorId(severity(report));
    this.statusItem.backgroundColor = color ? new vscode.ThemeColor(color) : undefined;
    this.statusItem.show();
  }

  /** `SOBA: Cancel Compaction` is offered while a compaction runs or waits (package.json `when`). */
  private renderCompacting(): void {
    const report = this.tracker.report;
    const compacting = this.running.size > 0 || report?.compacting === true || report?.compactQueued === true;
    void vscode.commands.executeCommand('setContext', 'soba.compacting', compacting);
  }

  /** The progress's Cancel: `soba/cancel` for the compacting session. */
  private async cancel(sessionId: string): Promise<void> {
    const client = this.requester();
    if (!client) return;
    try {
      const { cancelled } = await client.request('soba/cancel', { sessionId });
      // Not cancelled: the compaction ended first, and its end already said how.
      this.output.appendLine(`cancel ${sessionId}: ${cancelled ? 'cancelled' : 'no compaction was running'}`);
    } catch (err) {
      const message = err instanceof Error ? err.message : String(err);
      void vscode.window.showErrorMessage(`SOBA: could not cancel the compaction: ${message}`);
    }
  }

  private refreshing = false;

  private async refreshViews(): Promise<void> {
    const client = this.requester();
    if (!client || this.refreshing) return;
    this.refreshing = true;
    try {
      const target = this.target();
      // Each view stands alone: one failing request leaves the others current.
      const [sessions, flight, capsules] = await Promise.allSettled([
        client.request('soba/sessions', { workspace: target.workspace }),
        client.request('soba/flight', { ...target, limit: this.settings.flightRecordLimit }),
        client.request('soba/capsule/list', target),
      ]);
      if (sessions.status === 'fulfilled') this.views.sessions.set(sessionNodes(sessions.value.sessions));
      if (flight.status === 'fulfilled') {
        // Skips send no notification: the flight records are where the output learns of them.
        for (const line of this.compactionLog.recorded(flight.value.records)) this.output.appendLine(`compaction: ${line}`);
        const qualities = capsules.status === 'fulfilled' ? capsules.value.capsules : [];
        this.views.compactions.set(compactionNodes(flight.value.records, qualities));
      }
      if (capsules.status === 'fulfilled') this.views.capsules.set(capsuleNodes(capsules.value.capsules));
      for (const failed of [sessions, flight, capsules]) {
        if (failed.status === 'rejected') this.output.appendLine(`sidebar: ${String(failed.reason?.message ?? failed.reason)}`);
      }
    } finally {
      this.refreshing = false;
    }
  }

  private showProgress(action: ProgressAction): void {
    switch (action.kind) {
      case 'begin':
        void vscode.window.withProgress(
          { location: vscode.ProgressLocation.Notification, title: action.title, cancellable: true },
          (report, token) =>
            new Promise<void>((resolve) => {
              this.running.set(action.operationId, { report, done: resolve });
              // Cancel stops the compaction in the daemon; the progress closes with its `end`
              // (outcome `cancelled`), which says what came of it.
              token.onCancellationRequested(() => void this.cancel(action.sessionId));
            }),
        );
        this.renderCompacting();
        break;
      case 'report':
        this.running.get(action.operationId)?.report.report({ increment: action.increment, message: action.message });
        break;
      case 'end': {
        this.running.get(action.operationId)?.done();
        this.running.delete(action.operationId);
        this.renderCompacting();
        if (action.line === undefined) break;
        if (action.warning) void vscode.window.showWarningMessage(action.line);
        else void vscode.window.showInformationMessage(action.line);
        break;
      }
    }
  }
}

function vscodeUi(flightOutput: vscode.OutputChannel, documents: SobaDocuments): EditorUi {
  return {
    info: (message, ...actions) => Promise.resolve(vscode.window.showInformationMessage(message, ...actions)),
    warn: (message) => void vscode.window.showWarningMessage(message),
    error: (message) => void vscode.window.showErrorMessage(message),
    input: ({ prompt, placeHolder, required }) =>
      Promise.resolve(
        vscode.window.showInputBox({
          prompt,
          placeHolder,
          validateInput: required ? (value) => (value.trim() ? undefined : 'Required') : undefined,
        }),
      ),
    pick: async (items, placeHolder) => (await vscode.window.showQuickPick(items, { placeHolder }))?.value,
    saveFile: async (defaultFileName) => {
      const folder = vscode.workspace.workspaceFolders?.[0]?.uri;
      const uri = await vscode.window.showSaveDialog({
        defaultUri: folder ? vscode.Uri.joinPath(folder, defaultFileName) : undefined,
        filters: { 'Portable Capsule': ['capsule.md', 'md'] },
        saveLabel: 'Export Capsule',
      });
      return uri?.fsPath;
    },
    openCapsuleFile: async () => {
      const uris = await vscode.window.showOpenDialog({
        canSelectMany: false,
        filters: { 'Portable Capsule': ['capsule.md', 'md'] },
        openLabel: 'Load Capsule',
      });
      return uris?.[0]?.fsPath;
    },
    showDocument: (name, content) => void documents.show(name, content),
    confirm: async (message, detail, action) => (await vscode.window.showWarningMessage(message, { modal: true, detail }, action)) === action,
    showLines: (lines) => {
      flightOutput.clear();
      for (const line of lines) flightOutput.appendLine(line);
      flightOutput.show(true);
    },
  };
}
