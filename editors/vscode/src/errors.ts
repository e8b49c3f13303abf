/**
 * Turns a failed request into one sentence for people: what failed, what is guaranteed (the
 * protocol's error codes say what is left unchanged), never the raw JSON-RPC text. The full error
 * goes to the log; this is what a notification or the breakdown page shows.
 */
import { errorCode, errorMessage } from './protocol';

/** ctxd's own codes: version 2 moved them out of the range LSP uses (-32001/-32002 in version 1). */
const COMPACTION_FAILED = new Set([1001, -32001]);
const GIT_FAILED = new Set([1002, -32002]);
const STORE_FAILED = 1003;
const METHOD_NOT_FOUND = -32601;
const CANCELLED = -32800;
/** vscode-jsonrpc's codes for a connection that went away under a request. */
const CONNECTION_GONE = new Set([-32097, -32096, -32099]);

/** The daemon's message without transport wrapping ("Request ctxd/x failed with message: …"). */
function cleanMessage(err: unknown): string {
  const msg = errorMessage(err)
    .replace(/^Request \S+ failed with message:\s*/i, '')
    .replace(/^ctxd:\s*/, '')
    .trim();
  return msg.replace(/[.\s]+$/, '');
}

export function friendlyError(what: string, err: unknown): string {
  const code = errorCode(err);
  const msg = cleanMessage(err);
  if (code !== undefined && COMPACTION_FAILED.has(code)) return `${what} failed: ${msg}. The conversation is unchanged.`;
  if (code !== undefined && GIT_FAILED.has(code)) return `${what} failed: ${msg}. The working tree is unchanged.`;
  if (code === STORE_FAILED) return `${what} failed: ${msg}.`;
  if (code === CANCELLED) return `${what} was cancelled; nothing was changed.`;
  if (code === METHOD_NOT_FOUND) return `${what} needs a newer ctxd daemon: update your clone (git pull) and run ctxd: Install Daemon again.`;
  if ((code !== undefined && CONNECTION_GONE.has(code)) || /connection (got |is )?(closed|disposed)|not running/i.test(msg)) {
    return `${what} failed: the ctxd daemon is not running. Restart it from the ctxd menu in the status bar.`;
  }
  return `${what} failed: ${msg}.`;
}
