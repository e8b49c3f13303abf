/**
 * The only module that imports `vscode`. Everything else takes the small interfaces defined next
 * to its logic (GaugeSink, PanelSink, Ui, ConfigReader) and is tested with node's test runner,
 * without VS Code. Keep this file thin: adapters, no decisions.
 */
import * as vscode from 'vscode';
import type { Ui, PickItem, Severity } from './ui';
import type { FolderInfo, GaugeSink } from './gauge';
import type { PanelSink } from './breakdownPanel';
import { PAGE_COMMANDS } from './breakdownView';
import type { ConfigReader } from './settings';
import type { DiffFile, Disposable } from './protocol';
import { type TreeModel, type TreeNode, errorNode } from './trees';
import { plainText } from './text';
import type { LiveSearch, SearchAnswer } from './recall';

export type ExtensionContext = vscode.ExtensionContext;
export type LogOutputChannel = vscode.LogOutputChannel;

export function createOutputChannel(name: string): vscode.LogOutputChannel {
  return vscode.window.createOutputChannel(name, { log: true });
}

export function registerCommand(command: string, callback: (...args: unknown[]) => unknown): Disposable {
  return vscode.commands.registerCommand(command, callback);
}

export function getConfiguration(section: string): ConfigReader {
  return vscode.workspace.getConfiguration(section);
}

export function onDidChangeConfiguration(listener: (affects: (section: string) => boolean) => void): Disposable {
  return vscode.workspace.onDidChangeConfiguration((e) => listener((s) => e.affectsConfiguration(s)));
}

function folderInfo(folder: vscode.WorkspaceFolder): FolderInfo {
  return { uri: folder.uri.toString(), name: folder.name };
}

/** The folder of the active editor's file, else the first workspace folder. */
export function activeFolder(): FolderInfo | undefined {
  const doc = vscode.window.activeTextEditor?.document;
  const owner = doc ? vscode.workspace.getWorkspaceFolder(doc.uri) : undefined;
  const folder = owner ?? vscode.workspace.workspaceFolders?.[0];
  return folder ? folderInfo(folder) : undefined;
}

/** Fires when the active folder may have changed (editor switch, folders added or removed). */
export function onDidChangeActiveFolder(listener: () => void): Disposable {
  const subs = [
    vscode.window.onDidChangeActiveTextEditor(() => listener()),
    vscode.workspace.onDidChangeWorkspaceFolders(() => listener()),
  ];
  return { dispose: () => subs.forEach((s) => s.dispose()) };
}

export function createGaugeItem(command: string): GaugeSink & Disposable {
  const item = vscode.window.createStatusBarItem('ctxd.gauge', vscode.StatusBarAlignment.Right, 100);
  item.name = 'ctxd Context Usage';
  item.command = command;
  return {
    show(view) {
      item.text = view.text;
      const tooltip = new vscode.MarkdownString(view.tooltip);
      tooltip.supportThemeIcons = true;
      item.tooltip = tooltip;
      item.backgroundColor = view.backgroundColor ? new vscode.ThemeColor(view.backgroundColor) : undefined;
      item.accessibilityInformation = { label: `ctxd context usage ${view.text.replace(/\$\([^)]*\)\s*/g, '')}` };
      item.show();
    },
    dispose: () => item.dispose(),
  };
}

export interface BreakdownPanelHandle extends PanelSink {
  reveal(): void;
  onDidDispose(listener: () => void): Disposable;
}

const BREAKDOWN_VIEW = 'ctxd.breakdown';
const BREAKDOWN_OPTIONS = { enableScripts: false, enableCommandUris: [...PAGE_COMMANDS], retainContextWhenHidden: false, localResourceRoots: [] };

/** A new breakdown tab, or the one VS Code kept across a window reload (`restored`). */
export function createBreakdownPanel(restored?: vscode.WebviewPanel): BreakdownPanelHandle {
  const panel =
    restored ??
    vscode.window.createWebviewPanel(BREAKDOWN_VIEW, 'Context Usage', { viewColumn: vscode.ViewColumn.Active, preserveFocus: false }, BREAKDOWN_OPTIONS);
  panel.webview.options = BREAKDOWN_OPTIONS;
  return {
    cspSource: panel.webview.cspSource,
    setHtml: (html) => {
      panel.webview.html = html;
    },
    reveal: () => panel.reveal(),
    onDidDispose: (listener) => panel.onDidDispose(listener),
  };
}

/** Brings the breakdown tab back after a window reload (package.json: `onWebviewPanel:ctxd.breakdown`). */
export function registerBreakdownSerializer(revive: (panel: vscode.WebviewPanel) => Promise<void>): Disposable {
  return vscode.window.registerWebviewPanelSerializer(BREAKDOWN_VIEW, { deserializeWebviewPanel: (panel) => revive(panel) });
}

export type WebviewPanel = vscode.WebviewPanel;

/**
 * Hides the notification toasts (they stay in the notification centre): VS Code offers no way to
 * close one notification, and a tier notice that no longer holds must not stay on screen.
 */
export function hideToasts(): Thenable<unknown> {
  return vscode.commands.executeCommand('notifications.hideToasts');
}

export function showMessage(severity: Severity, rawMessage: string, ...actions: string[]): Thenable<string | undefined> {
  const message = plainText(rawMessage);
  if (severity === 'error') return vscode.window.showErrorMessage(message, ...actions);
  if (severity === 'warning') return vscode.window.showWarningMessage(message, ...actions);
  return vscode.window.showInformationMessage(message, ...actions);
}

/** How long a flow's request runs before its progress message shows. */
const PROGRESS_DELAY_MS = 400;

/** The palette flows' Ui on top of VS Code's quick picks, input boxes, modals and progress. */
export function createUi(): Ui {
  return {
    async pick<T>(items: PickItem<T>[], options: { title: string; placeHolder?: string }) {
      const chosen = await vscode.window.showQuickPick(
        items.map((i) => ({ label: i.label, description: i.description, detail: i.detail, value: i.value })),
        { title: options.title, placeHolder: options.placeHolder, matchOnDescription: true, matchOnDetail: true },
      );
      return chosen?.value;
    },
    input: (options) =>
      Promise.resolve(
        vscode.window.showInputBox({
          title: options.title,
          prompt: options.prompt,
          placeHolder: options.placeHolder,
          value: options.value,
          ignoreFocusOut: true,
        }),
      ),
    async confirm(message, detail, action) {
      const chosen = await vscode.window.showWarningMessage(message, { modal: true, detail }, action);
      return chosen === action;
    },
    progress: (title, task) => {
      // Most of the daemon's answers come in tens of milliseconds: a progress message then only
      // flashes, and it counts against VS Code's toasts (at most 3 in any 800 ms; the rest go to the
      // notification centre unseen), which could hide the result's message that follows it.
      const running = task();
      const shown = setTimeout(() => {
        void vscode.window.withProgress({ location: vscode.ProgressLocation.Notification, title, cancellable: false }, () =>
          running.then(() => undefined, () => undefined),
        );
      }, PROGRESS_DELAY_MS);
      const done = () => clearTimeout(shown);
      running.then(done, done);
      return running;
    },
    notify: (severity, message) => void showMessage(severity, message),
    ask: (severity, message, actions) => Promise.resolve(showMessage(severity, message, ...actions)),
  };
}

/**
 * A quick pick that asks `answer` again as the user types (after a short pause); a slower answer to
 * an older query is dropped. The rows are the daemon's ranking: VS Code does not filter them
 * (`alwaysShow`), and it re-sorts only rows whose label matches the query, which `recallItems`'
 * labels (icons alone) never do; descriptions and details are not matched.
 */
export const liveSearch: LiveSearch = <T>(
  options: { title: string; placeHolder: string },
  answer: (query: string) => Promise<SearchAnswer<T>>,
) =>
  new Promise<T | undefined>((resolve) => {
    type Row = vscode.QuickPickItem & { value: T };
    const box = vscode.window.createQuickPick<Row>();
    box.title = options.title;
    box.placeholder = options.placeHolder;
    box.matchOnDescription = false;
    box.matchOnDetail = false;
    let asked = 0;
    let timer: ReturnType<typeof setTimeout> | undefined;
    const ask = async (query: string) => {
      const mine = ++asked;
      box.busy = true;
      const a = await answer(query);
      if (mine !== asked) return;
      box.busy = false;
      box.title = `${options.title}: ${a.note}`;
      box.items = a.items.map((i) => ({ label: i.label, description: i.description, detail: i.detail, alwaysShow: true, value: i.value }));
    };
    box.onDidChangeValue((query) => {
      if (timer) clearTimeout(timer);
      timer = setTimeout(() => void ask(query), 200);
    });
    let chosen: T | undefined;
    box.onDidAccept(() => {
      chosen = box.selectedItems[0]?.value;
      if (chosen !== undefined) box.hide();
    });
    box.onDidHide(() => {
      if (timer) clearTimeout(timer);
      box.dispose();
      resolve(chosen);
    });
    box.show();
    void ask('');
  });

export function executeCommand(command: string, ...args: unknown[]): Thenable<unknown> {
  return vscode.commands.executeCommand(command, ...args);
}

/** Shows a TreeModel in the view `viewId` (declared in package.json). */
export function registerTree(viewId: string, model: TreeModel): Disposable {
  const changed = new vscode.EventEmitter<void>();
  const sub = model.onDidChange(() => changed.fire());
  const provider: vscode.TreeDataProvider<TreeNode> = {
    onDidChangeTreeData: changed.event,
    // A model's failure is its own row (trees.ts `errorNode`); this catch is only a last resort.
    getChildren: (node) => (node ? (node.children ?? []) : model.nodes().catch((err: unknown) => [errorNode('Listing', err)])),
    getTreeItem: (node) => {
      const state = !node.children
        ? vscode.TreeItemCollapsibleState.None
        : node.collapsed
          ? vscode.TreeItemCollapsibleState.Collapsed
          : vscode.TreeItemCollapsibleState.Expanded;
      const item = new vscode.TreeItem(node.label, state);
      item.id = node.id;
      item.description = node.description;
      item.tooltip = node.tooltip;
      item.contextValue = node.contextValue;
      if (node.icon) item.iconPath = new vscode.ThemeIcon(node.icon);
      if (node.command) item.command = node.command;
      return item;
    },
  };
  const view = vscode.window.createTreeView(viewId, { treeDataProvider: provider });
  // What another client changed (its threads, its snapshots) is read again when the view shows.
  const shown = view.onDidChangeVisibility((e) => {
    if (e.visible) changed.fire();
  });
  return { dispose: () => [view, sub, changed, shown].forEach((d) => d.dispose()) };
}

/** In-memory read-only documents: snapshot sides of diffs, archived items. */
const VIRTUAL_SCHEME = 'ctxd-readonly';
const virtualDocs = new Map<string, string>();
/** Tells VS Code a document it holds open (Show Status again, a tab restored by a reload) has new text. */
const virtualChanged = new vscode.EventEmitter<vscode.Uri>();

export function registerVirtualDocuments(): Disposable {
  const provider = vscode.workspace.registerTextDocumentContentProvider(VIRTUAL_SCHEME, {
    onDidChange: virtualChanged.event,
    provideTextDocumentContent: (uri) => virtualDocs.get(uri.toString()) ?? '',
  });
  return { dispose: () => provider.dispose() };
}

function virtualUri(pathPart: string, content: string): vscode.Uri {
  const uri = vscode.Uri.from({ scheme: VIRTUAL_SCHEME, path: `/${pathPart}` });
  const changed = virtualDocs.has(uri.toString()) || vscode.workspace.textDocuments.some((d) => d.uri.toString() === uri.toString());
  virtualDocs.set(uri.toString(), content);
  if (changed) virtualChanged.fire(uri);
  return uri;
}

/** VS Code's diff editor: the file at the snapshot (left) against the working tree (right). */
export async function openSnapshotDiff(file: DiffFile, snapshotId: string, workspace: string): Promise<void> {
  const short = snapshotId.slice(0, 7);
  const left = virtualUri(`${short}/${file.path}`, file.before ?? '');
  const right =
    file.status === 'deleted'
      ? virtualUri(`deleted/${file.path}`, '')
      : vscode.Uri.joinPath(vscode.Uri.parse(workspace), ...file.path.split('/'));
  await vscode.commands.executeCommand('vscode.diff', left, right, `${file.path} (snapshot ${short} ↔ working tree)`);
}

export async function openReadOnly(name: string, content: string, language: string): Promise<void> {
  const doc = await vscode.workspace.openTextDocument(virtualUri(name, content));
  await vscode.languages.setTextDocumentLanguage(doc, language);
  await vscode.window.showTextDocument(doc, { preview: true });
}

/** Fires when the window gets the focus back (another client may have changed things meanwhile). */
export function onDidFocusWindow(listener: () => void): Disposable {
  return vscode.window.onDidChangeWindowState((e) => {
    if (e.focused) listener();
  });
}

/** A file or folder the user picks in VS Code's open dialog (the remote's files in a remote window). */
export async function pickPath(options: { title: string; folders: boolean; filters?: Record<string, string[]> }): Promise<string | undefined> {
  const chosen = await vscode.window.showOpenDialog({
    title: options.title,
    openLabel: 'Choose',
    canSelectFiles: !options.folders,
    canSelectFolders: options.folders,
    canSelectMany: false,
    filters: options.filters,
  });
  return chosen?.[0]?.fsPath;
}

/**
 * Writes `ctxd.daemon.command` in the user's settings; in a remote window VS Code keeps this
 * machine-overridable setting in the remote's settings, where the daemon runs.
 */
export function setDaemonCommand(command: string[]): Thenable<void> {
  return vscode.workspace.getConfiguration('ctxd').update('daemon.command', command, vscode.ConfigurationTarget.Global);
}

/** The settings editor at `ctxd.daemon.command`, on the tab that can show it (Remote in a remote window). */
export async function openSettings(id: string): Promise<void> {
  // An options object: openRemoteSettings drops a plain string query (the tab opened unfiltered).
  const options = { query: `@id:${id}` };
  await vscode.commands.executeCommand(vscode.env.remoteName ? 'workbench.action.openRemoteSettings' : 'workbench.action.openSettings', options);
}

/** The extension's README (how to install ctxd by hand), rendered. */
export function openInstructions(extensionUri: vscode.Uri, file: string): Thenable<unknown> {
  return vscode.commands.executeCommand('markdown.showPreview', vscode.Uri.joinPath(extensionUri, file));
}

/** A folder of the extension's own on the machine where it runs (the daemon's venv goes there). */
export function storagePath(context: vscode.ExtensionContext): string {
  return context.globalStorageUri.fsPath;
}

/** Runs `task` under a progress notification that shows each line `task` reports. */
export function withProgress<T>(title: string, task: (report: (line: string) => void) => Promise<T>): Thenable<T> {
  return vscode.window.withProgress({ location: vscode.ProgressLocation.Notification, title, cancellable: false }, (progress) =>
    task((line) => progress.report({ message: line.slice(0, 120) })),
  );
}

export function isTrusted(): boolean {
  return vscode.workspace.isTrusted;
}

export function onDidGrantTrust(listener: () => void): Disposable {
  return vscode.workspace.onDidGrantWorkspaceTrust(listener);
}

/** The interpreter chosen in the Python extension, else `python.defaultInterpreterPath`. */
export async function pythonInterpreter(): Promise<string[] | undefined> {
  const ext = vscode.extensions.getExtension('ms-python.python');
  if (ext) {
    try {
      const api = ext.isActive ? ext.exports : await ext.activate();
      const env = api?.environments?.getActiveEnvironmentPath?.();
      const resolved = env ? await api.environments.resolveEnvironment(env) : undefined;
      const exe = resolved?.executable?.uri?.fsPath ?? env?.path;
      if (typeof exe === 'string' && exe) return [exe];
    } catch {
      // Fall through to the setting.
    }
  }
  const configured = vscode.workspace.getConfiguration('python').get<string>('defaultInterpreterPath');
  return configured && configured !== 'python' ? [configured] : undefined;
}

/** Sets a context key the `when` clauses of package.json read. */
export function setContext(key: string, value: unknown): Thenable<unknown> {
  return vscode.commands.executeCommand('setContext', key, value);
}

/** The active folder on disk (`ctxd hooks`' project scope), if it is a local one. */
export function activeFolderPath(): string | undefined {
  const doc = vscode.window.activeTextEditor?.document;
  const folder = (doc ? vscode.workspace.getWorkspaceFolder(doc.uri) : undefined) ?? vscode.workspace.workspaceFolders?.[0];
  return folder?.uri.scheme === 'file' ? folder.uri.fsPath : undefined;
}

export function workspaceFolderPaths(): string[] {
  return (vscode.workspace.workspaceFolders ?? []).map((f) => f.uri.fsPath);
}
