/**
 * The latest usage the extension knows per thread, kept from every answer and `ctxd/usageChanged`
 * so the gauge redraws without a request. An older `historyVersion` never replaces a newer one.
 */
import { Emitter } from './emitter';
import type { Disposable, Target, UsageChangedParams, UsageSnapshot } from './protocol';

export function usageKey(t: Target): string {
  return `${t.workspace}\u0000${t.thread}`;
}

function sameUsage(a: UsageSnapshot, b: UsageSnapshot): boolean {
  return (
    a.usedTokens === b.usedTokens &&
    a.contextWindow === b.contextWindow &&
    a.autoCompactLimit === b.autoCompactLimit &&
    a.tier === b.tier &&
    a.source === b.source &&
    a.historyVersion === b.historyVersion &&
    a.tokenizer === b.tokenizer &&
    a.tokenizerStatus === b.tokenizerStatus
  );
}

/** The snapshot without the notification's addressing; fields the daemon adds are kept as they came. */
function pickUsage(u: UsageSnapshot): UsageSnapshot {
  const { workspace: _w, thread: _t, ...snapshot } = u as UsageSnapshot & { workspace?: string; thread?: string };
  return snapshot;
}

export class UsageCache implements Disposable {
  private readonly usages = new Map<string, UsageSnapshot>();
  /** Per workspace, the thread whose usage changed last. */
  private readonly lastChanged = new Map<string, string>();
  private readonly emitter = new Emitter<UsageChangedParams>();

  /** Every change of a thread's known usage (and a redraw asked with `announce`). */
  readonly onDidChange = this.emitter.event;

  /** The daemon restarted: what was known may no longer hold. */
  clear(): void {
    this.usages.clear();
    this.lastChanged.clear();
  }

  get(t: Target): UsageSnapshot | undefined {
    return this.usages.get(usageKey(t));
  }

  /** The thread of `workspace` whose usage changed last, if any. */
  lastChangedThread(workspace: string): string | undefined {
    return this.lastChanged.get(workspace);
  }

  /** Keeps `usage` unless an equal or newer one is known; true (and listeners told) when it was kept. */
  update(t: Target, usage: UsageSnapshot): boolean {
    const prev = this.usages.get(usageKey(t));
    if (prev && (usage.historyVersion < prev.historyVersion || sameUsage(prev, usage))) return false;
    const snap = pickUsage(usage);
    this.usages.set(usageKey(t), snap);
    this.lastChanged.set(t.workspace, t.thread);
    this.emitter.fire({ workspace: t.workspace, thread: t.thread, ...snap });
    return true;
  }

  /** A usage from a `ctxd/threads` listing: kept when newer, told to nobody (the listing is not a change). */
  noteListed(t: Target, usage: UsageSnapshot): void {
    const prev = this.usages.get(usageKey(t));
    if (!prev || usage.historyVersion > prev.historyVersion) this.usages.set(usageKey(t), pickUsage(usage));
  }

  /** Tells listeners the thread's known usage again (a different thread is now shown). */
  announce(t: Target): void {
    const known = this.usages.get(usageKey(t));
    if (known) this.emitter.fire({ workspace: t.workspace, thread: t.thread, ...known });
  }

  dispose(): void {
    this.emitter.dispose();
  }
}
