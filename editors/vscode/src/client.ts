/**
 * Builds the LanguageClient that runs the daemon over stdio (the client appends `--stdio`): one
 * client for the window, with every workspace folder, no document synchronisation, the daemon's
 * log in the output channel.
 */
import {
  LanguageClient,
  type LanguageClientOptions,
  RevealOutputChannelOn,
  type ServerOptions,
  ShowMessageNotification,
  TransportKind,
} from 'vscode-languageclient/node';
import type { ManagedClient } from './daemon';
import type { Rpc } from './protocol';
import type { DaemonCommand } from './settings';

export const CLIENT_ID = 'ctxd';

export interface ClientConfig {
  command: DaemonCommand;
  initializationOptions: unknown;
  outputChannel: LanguageClientOptions['outputChannel'];
  cwd: string | undefined;
  /** Handles `window/showMessage` (the notifications level decides what is shown). */
  onShowMessage: (type: number, message: string) => void;
}

export function createClient(config: ClientConfig): ManagedClient {
  const serverOptions: ServerOptions = {
    command: config.command.command,
    args: config.command.args,
    transport: TransportKind.stdio,
    options: { cwd: config.cwd, env: { ...process.env, PYTHONUNBUFFERED: '1' } },
  };
  const clientOptions: LanguageClientOptions = {
    // ctxd is not a language server: no document is synchronised.
    documentSelector: [],
    outputChannel: config.outputChannel,
    revealOutputChannelOn: RevealOutputChannelOn.Never,
    initializationOptions: config.initializationOptions,
  };
  const client = new LanguageClient(CLIENT_ID, 'ctxd', serverOptions, clientOptions);
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
    onDidChangeState: (listener) => client.onDidChangeState(listener),
    rpc: () => rpc,
  };
}
