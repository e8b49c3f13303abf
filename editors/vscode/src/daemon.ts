/**
 * The daemon's lifecycle, independent of how its client is built: starts and stops go through one
 * queue, so a restart never overlaps another, and a request made while a start is in progress waits
 * for it instead of failing. Free of `vscode` (the client is made by a factory) so it is tested.
 */
import { setAgentNames } from './agents';
import type { Disposable, Rpc } from './protocol';
import type { DaemonCommand } from './settings';

/** vscode-languageclient's `State` values. */
export const ClientState = { Stopped: 1, Running: 2, Starting: 3 } as const;

/** Why the daemon is not running, in a form the UI can act on; `message` is for people. */
export type StopReason =
  | { kind: 'notInstalled'; message: string; command: DaemonCommand }
  | { kind: 'crashed'; message: string; crashes: number }
  | { kind: 'failed'; message: string; detail?: string };

/** A failed start in words: the transport's own text ("Pending response rejected…") is for the log. */
export function startFailure(err: unknown): string {
  const text = err instanceof Error ? err.message : String(err);
  if (/connection|disposed|Pending response|stream/i.test(text)) return 'The ctxd daemon exited while starting; see the "ctxd" output.';
  return `The ctxd daemon could not start: ${text}`;
}

/** Thrown by a client factory that knows why the daemon cannot start. */
export class DaemonStartError extends Error {
  constructor(readonly reason: StopReason) {
    super(reason.message);
  }
}

/** What the lifecycle needs of a LanguageClient. */
export interface ManagedClient {
  start(): Promise<void>;
  stop(timeout?: number): Promise<void>;
  dispose(timeout?: number): Promise<void>;
  isRunning(): boolean;
  onDidChangeState(listener: (e: { oldState: number; newState: number }) => void): Disposable;
  /** Called once after each start with the connection the extension's logic uses. */
  rpc(): Rpc;
  /** The `ctxd/*` methods the daemon announced at initialize. */
  methods(): string[] | undefined;
  /** The agents' names the daemon gave at initialize (`capabilities.experimental.ctxd.agents`). */
  agentNames?(): unknown;
  /** Set when the client gave up restarting a crashing daemon. */
  stopReason(): StopReason | undefined;
  /** True between a crash and the client's own restart of the daemon (a stop that is not the end). */
  willRestart(): boolean;
  /** Describes the command for messages ("python3 -m ctxd --stdio"). */
  readonly description: string;
}

export interface DaemonEvents {
  /** After every successful start (and every automatic restart by the client). */
  started(rpc: Rpc, methods: string[] | undefined): void;
  /** The daemon is not running (start failed, or it stopped). */
  stopped(reason: StopReason): void;
}

export class Daemon implements Disposable {
  private client: ManagedClient | undefined;
  private queue: Promise<void> = Promise.resolve();
  private stateSub: Disposable | undefined;

  constructor(
    private readonly build: () => Promise<ManagedClient>,
    private readonly events: DaemonEvents,
  ) {}

  /** Stops the running daemon (if any) and starts a new one, after whatever is already queued. */
  restart(): Promise<void> {
    return this.enqueue(true);
  }

  stop(): Promise<void> {
    return this.enqueue(false);
  }

  /** The running connection, once any queued start or stop has finished. */
  async rpc(): Promise<Rpc> {
    await this.queue;
    if (!this.client || !this.client.isRunning()) throw new Error('the ctxd daemon is not running');
    return this.client.rpc();
  }

  private enqueue(start: boolean): Promise<void> {
    // replace() never rejects, so one failed start does not wedge the queue.
    this.queue = this.queue.then(() => this.replace(start));
    return this.queue;
  }

  private async replace(start: boolean): Promise<void> {
    const old = this.client;
    this.client = undefined;
    this.stateSub?.dispose();
    this.stateSub = undefined;
    if (old) {
      try {
        await old.stop(2000);
      } catch {
        // A daemon that does not stop in time is killed by the client.
      }
      await old.dispose().catch(() => undefined);
    }
    if (!start) return;
    let client: ManagedClient | undefined;
    try {
      client = await this.build();
      this.client = client;
      await client.start();
      const current = client;
      this.stateSub = client.onDidChangeState((e) => {
        if (e.newState === ClientState.Stopped) {
          if (current.willRestart()) return;
          this.events.stopped(current.stopReason() ?? { kind: 'failed', message: 'The ctxd daemon stopped; see the "ctxd" output.' });
        } else if (e.newState === ClientState.Running && e.oldState !== ClientState.Running) {
          setAgentNames(current.agentNames?.());
          this.events.started(current.rpc(), current.methods());
        }
      });
      setAgentNames(client.agentNames?.());
      this.events.started(client.rpc(), client.methods());
    } catch (err) {
      this.client = undefined;
      if (client) await client.dispose().catch(() => undefined);
      if (err instanceof DaemonStartError) {
        this.events.stopped(err.reason);
      } else {
        this.events.stopped({ kind: 'failed', message: startFailure(err), detail: `${client?.description ?? 'ctxd'}: ${String(err)}` });
      }
    }
  }

  dispose(): void {
    void this.stop();
  }
}
