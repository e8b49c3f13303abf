/** Restarts are serialised: a stop always finishes before the next start, requests wait for starts. */
import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import { ClientState, Daemon, DaemonStartError, startFailure, type ManagedClient, type StopReason } from '../src/daemon';
import { agentOf } from '../src/agents';
import { Emitter } from '../src/emitter';
import { Debouncer } from '../src/gauge';
import type { Rpc } from '../src/protocol';

const tick = () => new Promise((r) => setTimeout(r, 5));

class FakeClient implements ManagedClient {
  running = false;
  readonly stateChanged = new Emitter<{ oldState: number; newState: number }>();
  constructor(readonly n: number, private readonly log: string[], private readonly fail = false) {}
  get description() {
    return `fake-${this.n} --stdio`;
  }
  async start() {
    this.log.push(`start ${this.n}`);
    await tick();
    if (this.fail) throw new Error('spawn fake ENOENT');
    this.running = true;
    this.log.push(`started ${this.n}`);
  }
  async stop() {
    this.log.push(`stop ${this.n}`);
    await tick();
    this.running = false;
    this.log.push(`stopped ${this.n}`);
  }
  async dispose() {}
  isRunning() {
    return this.running;
  }
  onDidChangeState(l: (e: { oldState: number; newState: number }) => void) {
    return this.stateChanged.event(l);
  }
  methods() {
    return ['ctxd/usage'];
  }
  /** What its daemon's initialize answer gives as the agents' names. */
  names: unknown;
  agentNames() {
    return this.names;
  }
  reason: StopReason | undefined;
  restarting = false;
  willRestart() {
    return this.restarting;
  }
  stopReason() {
    return this.reason;
  }
  rpc(): Rpc {
    return {
      sendRequest: async <R>() => `answer from ${this.n}` as R,
      onNotification: () => ({ dispose() {} }),
    };
  }
}

function harness(failing: number[] = []) {
  const log: string[] = [];
  const clients: FakeClient[] = [];
  const events: string[] = [];
  const daemon = new Daemon(
    async () => {
      const c = new FakeClient(clients.length + 1, log, failing.includes(clients.length + 1));
      c.names = { qwen: `Qwen Code ${c.n}` };
      clients.push(c);
      return c;
    },
    { started: () => events.push('started'), stopped: (r) => events.push(`stopped: ${r.kind}: ${r.message}`) },
  );
  return { log, clients, events, daemon };
}

describe('Daemon lifecycle', () => {
  test("every start, and the client's own restart, takes the agents' names the daemon gives", async () => {
    const { daemon, clients } = harness();
    await daemon.restart();
    assert.equal(agentOf('qwen').name, 'Qwen Code 1');
    await daemon.restart();
    assert.equal(agentOf('qwen').name, 'Qwen Code 2');
    clients[1].names = { qwen: 'Qwen Code, restarted' };
    clients[1].stateChanged.fire({ oldState: ClientState.Starting, newState: ClientState.Running });
    assert.equal(agentOf('qwen').name, 'Qwen Code, restarted');
    clients[1].names = undefined; // a daemon that gives none: the gauge's word
    clients[1].stateChanged.fire({ oldState: ClientState.Starting, newState: ClientState.Running });
    assert.equal(agentOf('qwen').name, 'Qwen');
    await daemon.stop();
  });

  test('concurrent restarts run one after another, never overlapping', async () => {
    const { log, daemon } = harness();
    await Promise.all([daemon.restart(), daemon.restart(), daemon.restart()]);
    assert.deepEqual(log, [
      'start 1', 'started 1',
      'stop 1', 'stopped 1', 'start 2', 'started 2',
      'stop 2', 'stopped 2', 'start 3', 'started 3',
    ]);
  });

  test('a request made during a start waits for it and goes to the new daemon', async () => {
    const { daemon } = harness();
    void daemon.restart();
    const rpc = await daemon.rpc();
    assert.equal(await rpc.sendRequest('x', {}), 'answer from 1');
    void daemon.restart();
    assert.equal(await (await daemon.rpc()).sendRequest('x', {}), 'answer from 2');
  });

  test('a failed start is reported, requests fail, and the next restart works', async () => {
    const { daemon, events } = harness([1]);
    await daemon.restart();
    assert.match(events[0], /^stopped: failed: The ctxd daemon could not start: spawn fake ENOENT$/);
    await assert.rejects(daemon.rpc(), /not running/);
    await daemon.restart();
    assert.equal(events.at(-1), 'started');
    assert.equal(await (await daemon.rpc()).sendRequest('x', {}), 'answer from 2');
  });

  test('a daemon that stops on its own is reported; an automatic restart is picked up', async () => {
    const { daemon, clients, events } = harness();
    await daemon.restart();
    clients[0].stateChanged.fire({ oldState: ClientState.Running, newState: ClientState.Stopped });
    assert.match(events.at(-1)!, /^stopped: failed: The ctxd daemon stopped/);
    clients[0].stateChanged.fire({ oldState: ClientState.Starting, newState: ClientState.Running });
    assert.equal(events.at(-1), 'started');
    await daemon.stop();
    assert.equal(clients[0].running, false);
    await assert.rejects(daemon.rpc(), /not running/);
  });

  test('a start that dies on the wire is told in words, not in the transport\'s', () => {
    assert.equal(startFailure(new Error('Pending response rejected since connection got disposed')), 'The ctxd daemon exited while starting; see the "ctxd" output.');
    assert.equal(startFailure(new Error('spawn python9 ENOENT')), 'The ctxd daemon could not start: spawn python9 ENOENT');
  });

  test('a crash the client restarts from is not reported; the storm that ends it is, with the count', async () => {
    const { daemon, clients, events } = harness();
    await daemon.restart();
    const before = events.length;
    clients[0].restarting = true;
    clients[0].stateChanged.fire({ oldState: ClientState.Running, newState: ClientState.Stopped });
    assert.equal(events.length, before);
    clients[0].restarting = false;
    clients[0].reason = { kind: 'crashed', message: 'ctxd stopped after 5 crashes in 3 minutes.', crashes: 5 };
    clients[0].stateChanged.fire({ oldState: ClientState.Running, newState: ClientState.Stopped });
    assert.equal(events.at(-1), 'stopped: crashed: ctxd stopped after 5 crashes in 3 minutes.');
  });

  test('a factory that knows why the daemon cannot start says so', async () => {
    const events: StopReason[] = [];
    const command = { command: '/nowhere/python3', args: ['-m', 'ctxd'] };
    const daemon = new Daemon(
      async () => {
        throw new DaemonStartError({ kind: 'notInstalled', message: 'not installed', command });
      },
      { started: () => undefined, stopped: (r) => events.push(r) },
    );
    await daemon.restart();
    assert.deepEqual(events, [{ kind: 'notInstalled', message: 'not installed', command }]);
    await assert.rejects(daemon.rpc(), /not running/);
  });

  test('settings changes in a burst restart once (debounced)', async () => {
    const { daemon, clients } = harness();
    await daemon.restart();
    let scheduled = 0;
    let restarts: Debouncer | undefined;
    const fired = new Promise<void>((resolve) => {
      restarts = new Debouncer(20, () => {
        scheduled++;
        resolve(daemon.restart());
      });
    });
    restarts!.schedule();
    restarts!.schedule();
    restarts!.schedule();
    await fired;
    assert.equal(scheduled, 1);
    assert.equal(clients.length, 2);
    restarts!.dispose();
  });
});
