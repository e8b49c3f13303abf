/**
 * The one notification for a daemon that is not running: what it says and which way out it offers.
 * Each distinct failure is shown once until the daemon runs again (restarts do not repeat it). Pure.
 */
import type { StopReason } from './daemon';

export const ACTIONS = { install: 'Install', setPath: 'Set path', showLog: 'Show log', restart: 'Restart' } as const;
export type FailureAction = (typeof ACTIONS)[keyof typeof ACTIONS];

export interface FailureNotice {
  message: string;
  actions: FailureAction[];
}

export class FailureNotices {
  private shown: string | undefined;

  /** The notice to show for `reason`, or undefined when this failure was already shown. */
  stopped(reason: StopReason): FailureNotice | undefined {
    const key = `${reason.kind}\u0000${reason.message}`;
    if (key === this.shown) return undefined;
    this.shown = key;
    if (reason.kind === 'notInstalled') return { message: reason.message, actions: [ACTIONS.install, ACTIONS.setPath, ACTIONS.showLog] };
    return { message: reason.message, actions: [ACTIONS.restart, ACTIONS.showLog] };
  }

  started(): void {
    this.shown = undefined;
  }
}
