/**
 * The daemon's lifecycle, independent of how its client is built: starts and stops go through one
 * queue, so a restart never overlaps another, and a request made while a start is in progress waits
 * for it instead of failing. Free of `vscode` (the client is made by a factory) so it is tested.
 */
import type { Disposable, Rpc } from './protocol';

/** vscode-languageclient's `State` values. */
export const ClientState = { Stopped: 1, Running: 2, Starting: 3 } as const;

/** What the lifecycle needs of a LanguageClient. */
export interface ManagedClient {
  start(): Promise<void>;
  stop(timeout?: number): Promise<void>;
  dispose(timeout?: number): Promise<void>;
  isRunning(): boolean;
  onDidChangeState(listener: (e: { oldState: number; newState: number }) => void): Disposable;
  /** Called once after each start with the connection the extension's logic uses. */
  rpc(): Rpc;
  /** Describes the command for messages ("python3 -m ctxd --stdio"). */
  readonly description: string;
}

export interface DaemonEvents {
  /** After every successful start (and every automatic restart by the client). */
  started(rpc: Rpc): void;
  /** The daemon is not running (start failed, or it stopped); `reason` is for people. */
  stopped(reason: string): void;
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
        if (e.newState === ClientState.Stopped) this.events.stopped('The daemon stopped; see the "ctxd" output.');
        else if (e.newState === ClientState.Running && e.oldState !== ClientState.Running) {
          this.events.started(current.rpc());
        }
      });
      this.events.started(client.rpc());
    } catch (err) {
      this.client = undefined;
      if (client) await client.dispose().catch(() => undefined);
      const what = client ? client.description : 'ctxd';
      this.events.stopped(`Could not start \`${what}\`: ${err instanceof Error ? err.message : String(err)}`);
    }
  }

  dispose(): void {
    void this.stop();
  }
}
