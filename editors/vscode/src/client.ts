/**
 * Builds the LanguageClient that runs the daemon over stdio (the client appends `--stdio`): one
 * client for the window, with every workspace folder, no document synchronisation, the daemon's
 * log in the output channel. The client's own notifications are turned off: a crash storm becomes
 * a `StopReason`, and the extension says it in words with a Restart action.
 */
import {
  CloseAction,
  ErrorAction,
  LanguageClient,
  type LanguageClientOptions,
  RevealOutputChannelOn,
  type ServerOptions,
  ShowMessageNotification,
  State as ClientState,
  TransportKind,
} from 'vscode-languageclient/node';
import { CrashPolicy, crashStormMessage } from './crashes';
import { pythonSafeEnv } from './probe';
import type { ManagedClient, StopReason } from './daemon';
import type { Rpc } from './protocol';
import type { DaemonCommand } from './settings';

export const CLIENT_ID = 'ctxd';

export interface ClientConfig {
  command: DaemonCommand;
  initializationOptions: unknown;
  outputChannel: NonNullable<LanguageClientOptions['outputChannel']> & { error(message: string): void };
  cwd: string | undefined;
  /** Handles `window/showMessage` (the notifications level decides what is shown). */
  onShowMessage: (type: number, message: string) => void;
}

export function createClient(config: ClientConfig): ManagedClient {
  const serverOptions: ServerOptions = {
    command: config.command.command,
    args: config.command.args,
    transport: TransportKind.stdio,
    options: { cwd: config.cwd, env: pythonSafeEnv({ ...process.env, PYTHONUNBUFFERED: '1' }) },
  };
  const crashes = new CrashPolicy();
  let stopReason: StopReason | undefined;
  let restarting = false;
  const clientOptions: LanguageClientOptions = {
    // ctxd is not a language server: no document is synchronised.
    documentSelector: [],
    outputChannel: config.outputChannel,
    revealOutputChannelOn: RevealOutputChannelOn.Never,
    initializationOptions: config.initializationOptions,
    initializationFailedHandler: (error) => {
      config.outputChannel.error(`the daemon refused to initialize: ${error instanceof Error ? error.message : String(error)}`);
      return false;
    },
    errorHandler: {
      error: (error, _message, count) => {
        config.outputChannel.error(`connection error: ${error.message}`);
        return { action: count && count <= 3 ? ErrorAction.Continue : ErrorAction.Shutdown, handled: true };
      },
      closed: () => {
        const verdict = crashes.crashed(Date.now());
        if (verdict.restart) {
          config.outputChannel.error('the daemon exited unexpectedly; restarting it');
          restarting = true;
          return { action: CloseAction.Restart, handled: true };
        }
        const message = crashStormMessage(verdict.crashes);
        stopReason = { kind: 'crashed', message, crashes: verdict.crashes };
        restarting = false;
        config.outputChannel.error(message);
        return { action: CloseAction.DoNotRestart, handled: true };
      },
    },
  };
  const client = new LanguageClient(CLIENT_ID, 'ctxd', serverOptions, clientOptions);
  // The client forces some of its own errors into notifications ("couldn't create connection to
  // server", "Restarting server failed"): raw text, and a second message beside the extension's own.
  // They still go to the output channel; the extension tells the user, once, in words.
  (client as unknown as { showNotificationMessage: () => void }).showNotificationMessage = () => undefined;
  const rpc: Rpc = {
    sendRequest: <R>(method: string, params: unknown) => client.sendRequest<R>(method, params),
    onNotification: (method, handler) => client.onNotification(method, handler),
  };
  return {
    description: [config.command.command, ...config.command.args, '--stdio'].join(' '),
    async start() {
      await client.start();
      // Replaces the client's own handler, so the notifications level applies to the daemon's messages.
      client.onNotification(ShowMessageNotification.type, (p) => config.onShowMessage(p.type, p.message));
    },
    stop: (timeout) => client.stop(timeout),
    dispose: (timeout) => client.dispose(timeout),
    isRunning: () => client.isRunning(),
    onDidChangeState: (listener) =>
      client.onDidChangeState((e) => {
        if (e.newState === ClientState.Running) restarting = false;
        listener(e);
      }),
    rpc: () => rpc,
    methods: () => {
      const methods = (client.initializeResult?.capabilities as { experimental?: { ctxd?: { methods?: unknown } } } | undefined)
        ?.experimental?.ctxd?.methods;
      return Array.isArray(methods) ? methods.filter((m): m is string => typeof m === 'string') : undefined;
    },
    agentNames: () =>
      (client.initializeResult?.capabilities as { experimental?: { ctxd?: { agents?: unknown } } } | undefined)?.experimental?.ctxd?.agents,
    stopReason: () => stopReason,
    willRestart: () => restarting,
  };
}
