/**
 * The only module that imports `vscode`. Everything else takes the small interfaces defined next
 * to its logic (GaugeSink, PanelSink, Ui, ConfigReader) and is tested with node's test runner,
 * without VS Code. Keep this file thin: adapters, no decisions.
 */
import * as vscode from 'vscode';
import type { Ui, PickItem, Severity } from './commands';
import type { FolderInfo, GaugeSink } from './gauge';
import type { PanelSink } from './breakdownPanel';
import type { ConfigReader } from './settings';
import type { Disposable } from './protocol';

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

export function createBreakdownPanel(): BreakdownPanelHandle {
  const panel = vscode.window.createWebviewPanel(
    'ctxd.breakdown',
    'Context Usage',
    { viewColumn: vscode.ViewColumn.Active, preserveFocus: false },
    { enableScripts: false, retainContextWhenHidden: false, localResourceRoots: [] },
  );
  return {
    cspSource: panel.webview.cspSource,
    setHtml: (html) => {
      panel.webview.html = html;
    },
    reveal: () => panel.reveal(),
    onDidDispose: (listener) => panel.onDidDispose(listener),
  };
}

export function showMessage(severity: Severity, message: string): void {
  if (severity === 'error') void vscode.window.showErrorMessage(message);
  else if (severity === 'warning') void vscode.window.showWarningMessage(message);
  else void vscode.window.showInformationMessage(message);
}

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
        vscode.window.showInputBox({ title: options.title, prompt: options.prompt, placeHolder: options.placeHolder }),
      ),
    async confirm(message, detail, action) {
      const chosen = await vscode.window.showWarningMessage(message, { modal: true, detail }, action);
      return chosen === action;
    },
    progress: (title, task) =>
      Promise.resolve(
        vscode.window.withProgress({ location: vscode.ProgressLocation.Notification, title, cancellable: false }, () =>
          task(),
        ),
      ),
    notify: showMessage,
  };
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

export function workspaceFolderPaths(): string[] {
  return (vscode.workspace.workspaceFolders ?? []).map((f) => f.uri.fsPath);
}
