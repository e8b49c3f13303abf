/**
 * "Search history…" in the Threads view: a search box whose results come from `ctxd/recall` as the
 * user types (every thread of the workspace, compacted parts included), and the chosen item opened
 * whole and read-only from `ctxd/item`, saying whether a compaction replaced it. Free of `vscode`:
 * the live search box and the document opener are passed in, so the tests drive the flow against
 * the real daemon.
 */
import { formatAge } from './age';
import type { CtxdService } from './api';
import { conversationMarkdown } from './conversation';
import { friendlyError } from './errors';
import { type ThreadFacts, threadFacts, threadLabel, threadName, threadPhrase } from './followed';
import { type ItemResult, Method, type RecallHit, type RecallResult } from './protocol';
import { type PickItem, type Ui, attempt } from './ui';

/** What a search box shows for one query: the rows, and a line on them (a count or the failure). */
export interface SearchAnswer<T> {
  items: PickItem<T>[];
  note: string;
}

/** A search box that asks `answer` for every query typed; resolves to the chosen row's value. */
export type LiveSearch = <T>(
  options: { title: string; placeHolder: string },
  answer: (query: string) => Promise<SearchAnswer<T>>,
) => Promise<T | undefined>;

export const SEARCH_TITLE = 'ctxd: Search History';
const LIMIT = 50;

function oneLine(text: string, max: number): string {
  const flat = text.replace(/\s+/g, ' ').trim();
  return flat.length > max ? `${flat.slice(0, max - 1)}…` : flat;
}

/** Where a match sits, in words: replaced by a compaction (archived) or still in the conversation. */
export function placeText(archived: boolean): string {
  return archived ? 'replaced by a compaction' : 'in the conversation';
}

function kindText(hit: Pick<RecallHit, 'type' | 'role'>): string {
  if (hit.type === 'message') return hit.role === 'assistant' ? 'assistant reply' : hit.role === 'user' ? 'your message' : `${hit.role ?? 'a'} message`;
  if (hit.type === 'function_call' || hit.type === 'custom_tool_call' || hit.type === 'local_shell_call') return 'tool call';
  if (hit.type.endsWith('_output')) return 'tool output';
  return hit.type.replace(/_/g, ' ');
}

/** The icons that lead a row: an archive for an item a compaction replaced, a speech bubble for one still in the conversation. */
export const ARCHIVED_ICON = '$(archive)';
export const LIVE_ICON = '$(comment)';

/**
 * The search box's rows for `ctxd/recall`'s matches, in the daemon's order (best first). VS Code's
 * quick pick re-sorts the rows whose label matches what was typed (the setting that stops it,
 * `sortByLabel`, is not public API), so a row's label is only its icon, which it does not match:
 * the snippet is the description (not matched: `liveSearch` turns that off) and whether a
 * compaction replaced the item leads the second line. `$(` in a snippet is broken so VS Code does
 * not read it as an icon.
 */
export function recallItems(hits: readonly RecallHit[], now: number, facts: (thread: string) => ThreadFacts = (t) => threadFacts(t)): PickItem<RecallHit>[] {
  return hits.map((h) => ({
    label: h.archived ? ARCHIVED_ICON : LIVE_ICON,
    description: oneLine(h.snippet, 160).replace(/\$\(/g, '$\u200b(') || '(no text)',
    detail: [
      placeText(h.archived),
      threadLabel(facts(h.thread), 40),
      h.turn ? `turn ${h.turn.index}: ${oneLine(h.turn.text, 60)}` : undefined,
      kindText(h),
      h.createdAt ? formatAge(h.createdAt, now) : undefined,
    ]
      .filter(Boolean)
      .join(' · ')
      .replace(/\$\(/g, '$\u200b('),
    value: h,
  }));
}

/** The line above the rows: how many of how many matched. */
export function recallNote(result: RecallResult): string {
  if (result.results.length === 0) return 'No item matches.';
  const shown = result.results.length;
  return result.total > shown ? `The best ${shown} of ${result.total} matching items.` : `${shown} matching item${shown === 1 ? '' : 's'}.`;
}

/**
 * A read-only document for one item: the session by its title, where the item is (replaced by a
 * compaction or not), its turn, then the item as the conversation shows it (no JSON).
 */
export function itemDocument(result: ItemResult, hit: Pick<RecallHit, 'thread' | 'turn'>, facts: ThreadFacts = threadFacts(hit.thread)): { name: string; content: string } {
  const where = result.archived
    ? 'A compaction replaced this item: the model no longer sees it. ctxd keeps it in the thread’s archive.'
    : 'This item is in the conversation the model sees.';
  const title = threadPhrase(facts, 80);
  const lines = [`# ${title.charAt(0).toUpperCase()}${title.slice(1)}`, '', where];
  if (hit.turn) lines.push('', `Turn ${hit.turn.index}: ${oneLine(hit.turn.text, 200)}`);
  lines.push('', conversationMarkdown([result.item], facts.source ?? undefined), '');
  const safe = threadName(facts, 40).replace(/[^\w.-]+/g, '_');
  return { name: `history/${safe}-item-${result.seq}.md`, content: lines.join('\n') };
}

/**
 * Searches the workspace's history as the user types; opens the chosen item read-only. Resolves to
 * the item opened, undefined when cancelled or failed (the failure is shown).
 */
export async function searchHistoryFlow(
  ui: Ui,
  service: CtxdService,
  search: LiveSearch,
  open: (name: string, content: string) => Promise<void>,
  workspace: string | undefined,
  now: () => number = Date.now,
): Promise<ItemResult | undefined> {
  if (!workspace) {
    ui.notify('info', 'Open a folder to search its history.');
    return undefined;
  }
  // A daemon that is starting is waited for; one that is not running is said as such (not "update it").
  if (!(await attempt(ui, 'Search', () => service.ready()))) return undefined;
  if (!service.supports(Method.recall)) {
    ui.notify('info', 'This ctxd daemon cannot search history: update your clone (git pull) and run ctxd: Install Daemon again.');
    return undefined;
  }
  const hit = await search<RecallHit>(
    { title: SEARCH_TITLE, placeHolder: 'Words from any thread, compacted parts included ("quoted phrase" too)' },
    async (query) => {
      if (!query.trim()) return { items: [], note: 'Type words to search every thread of this folder.' };
      try {
        const result = await service.recall(query, { workspace, scope: 'workspace', limit: LIMIT });
        return { items: recallItems(result.results, now(), (t) => service.threads.facts(workspace, t)), note: recallNote(result) };
      } catch (err) {
        return { items: [], note: friendlyError('Search', err) };
      }
    },
  );
  if (!hit) return undefined;
  const result = await ui.progress('ctxd: reading the item…', async () => {
    try {
      return await service.item(hit.seq, { workspace, thread: hit.thread });
    } catch (err) {
      ui.notify('error', friendlyError('Reading the item', err));
      return undefined;
    }
  });
  if (!result) return undefined;
  const doc = itemDocument(result, hit, service.threads.facts(workspace, hit.thread));
  await open(doc.name, doc.content);
  return result;
}
