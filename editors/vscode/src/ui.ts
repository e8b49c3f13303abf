/**
 * The few dialogs a flow needs (pick, input, confirm, progress, notifications), as an interface:
 * vscodeapi.ts gives VS Code's, the tests a scripted one. `attempt` turns a failure into one
 * sentence shown to the user.
 */
import { friendlyError } from './errors';

export interface PickItem<T> {
  label: string;
  description?: string;
  detail?: string;
  value: T;
}

export type Severity = 'info' | 'warning' | 'error';

export interface Ui {
  pick<T>(items: PickItem<T>[], options: { title: string; placeHolder?: string }): Promise<T | undefined>;
  input(options: { title: string; prompt: string; placeHolder?: string; value?: string }): Promise<string | undefined>;
  /** A modal confirmation; true when the user chose `action`. */
  confirm(message: string, detail: string, action: string): Promise<boolean>;
  progress<T>(title: string, task: () => Promise<T>): Promise<T>;
  notify(severity: Severity, message: string): void;
  /** A notification with buttons; resolves to the chosen one (undefined when dismissed). */
  ask(severity: Severity, message: string, actions: string[]): Promise<string | undefined>;
}

/** Runs `run`; a failure is shown as one sentence (see errors.ts) and gives undefined. */
export async function attempt<T>(ui: Ui, what: string, run: () => Promise<T>): Promise<T | undefined> {
  try {
    return await run();
  } catch (err) {
    ui.notify('error', friendlyError(what, err));
    return undefined;
  }
}
