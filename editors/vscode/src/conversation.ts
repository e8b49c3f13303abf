/**
 * Stored items as a conversation people read: the user's words, the agent's answers, and tool
 * calls naming the tool and its file or command, with the text's own line breaks (never a JSON
 * string's `\n`). Archived items (History → a row) and a search hit (Search history…) open as this
 * Markdown, read-only. Pure.
 */
import { agentOf } from './agents';
import type { Item } from './protocol';

type Loose = Record<string, unknown>;

function str(v: unknown): string {
  return typeof v === 'string' ? v : '';
}

/** The text of a message's content (a string, or parts with `text`). */
export function contentText(content: unknown): string {
  if (typeof content === 'string') return content;
  if (!Array.isArray(content)) return '';
  return content
    .map((p) => {
      const part = p as Loose;
      if (typeof part?.text === 'string') return part.text;
      if (part?.type === 'input_image' || part?.type === 'image') return '[image]';
      return '';
    })
    .filter(Boolean)
    .join('\n');
}

/** The arguments of a tool call as an object (they travel as a JSON string). */
function argumentsOf(item: Loose): Loose {
  const raw = item.arguments ?? item.input;
  if (raw && typeof raw === 'object') return raw as Loose;
  if (typeof raw === 'string') {
    try {
      const parsed = JSON.parse(raw);
      if (parsed && typeof parsed === 'object') return parsed as Loose;
    } catch {
      // A custom tool's free text (apply_patch): read below.
    }
    return { text: raw };
  }
  return {};
}

const FILE_KEYS = ['file_path', 'path', 'filePath', 'notebook_path', 'absolute_path', 'filename', 'file'];

/** What a tool call works on, in a few words: its file(s), command or pattern. */
export function toolTarget(item: Loose): string {
  const args = argumentsOf(item);
  for (const k of FILE_KEYS) if (typeof args[k] === 'string' && args[k]) return args[k] as string;
  if (Array.isArray(args.paths)) return (args.paths as unknown[]).filter((p) => typeof p === 'string').join(', ');
  // apply_patch: "*** Update File: src/app.py"
  const patch = str(args.text) || str(args.input) || str(args.patch);
  const files = [...patch.matchAll(/^\*\*\* (?:Update|Add|Delete) File: (.+)$/gm)].map((m) => m[1].trim());
  if (files.length) return files.join(', ');
  const command = args.command ?? args.cmd ?? (item.action as Loose | undefined)?.command;
  if (Array.isArray(command)) return command.map(String).join(' ');
  if (typeof command === 'string') return command;
  for (const k of ['pattern', 'query', 'url', 'description', 'prompt']) if (typeof args[k] === 'string' && args[k]) return args[k] as string;
  return '';
}

function oneLine(text: string, max: number): string {
  const flat = text.replace(/\s+/g, ' ').trim();
  return flat.length > max ? `${flat.slice(0, max - 1)}…` : flat;
}

/** Text that may hold Markdown, fenced so that the page shows it as it was written. */
function fenced(text: string, maxLines = 60): string {
  let lines = text.replace(/\r\n/g, '\n').replace(/\s+$/, '').split('\n');
  const cut = lines.length > maxLines ? lines.length - maxLines : 0;
  if (cut) lines = lines.slice(0, maxLines);
  const longest = Math.max(2, ...[...text.matchAll(/`+/g)].map((m) => m[0].length));
  const fence = '`'.repeat(longest + 1);
  return `${fence}text\n${lines.join('\n')}\n${fence}${cut ? `\n(${cut} more line${cut === 1 ? '' : 's'})` : ''}`;
}

/** One item as a heading and its text; tool outputs name the call they answer. */
export function itemBlock(item: Item, agentName: string, calls: ReadonlyMap<string, string> = new Map()): string {
  const it = item as unknown as Loose;
  const type = str(it.type);
  if (type === 'message') {
    const role = str(it.role);
    const text = contentText(it.content).trim();
    const who = role === 'user' ? 'You' : role === 'assistant' ? agentName : role === 'developer' ? 'Developer instructions' : `${role || 'Other'} message`;
    return `### ${who}\n\n${text || '(no text)'}`;
  }
  if (type === 'function_call' || type === 'custom_tool_call' || type === 'local_shell_call') {
    const name = str(it.name) || (type === 'local_shell_call' ? 'shell' : 'tool');
    const target = toolTarget(it);
    return `### Tool call: ${name}${target ? ` · ${oneLine(target, 120)}` : ''}`;
  }
  if (type.endsWith('_output')) {
    const call = calls.get(str(it.call_id));
    const out = it.output;
    const text = typeof out === 'string' ? out : contentText((out as Loose | undefined)?.content ?? out) || JSON.stringify(out ?? '', null, 2);
    return `### Tool result${call ? ` of ${call}` : ''}\n\n${fenced(text, 30)}`;
  }
  if (type === 'reasoning') {
    const summary = Array.isArray(it.summary) ? contentText(it.summary) : '';
    const text = summary || contentText(it.content);
    return `### ${agentName}'s reasoning\n\n${text.trim() ? fenced(text, 20) : '(hidden by the model)'}`;
  }
  if (type === 'compaction' || type === 'compaction_summary') {
    const text = contentText(it.content) || str(it.summary) || str(it.text);
    return `### Compaction summary\n\n${text.trim() ? fenced(text, 40) : '(encrypted by the model provider)'}`;
  }
  if (type === 'ghost_snapshot') return `### Snapshot of the files`;
  return `### ${type.replace(/_/g, ' ') || 'item'}\n\n${fenced(JSON.stringify(item, null, 2), 20)}`;
}

/** The items as a conversation, in their order. */
export function conversationMarkdown(items: readonly Item[], source?: string): string {
  const agentName = source && source !== 'client' ? agentOf(source).name : 'Assistant';
  const calls = new Map<string, string>();
  for (const i of items) {
    const it = i as unknown as Loose;
    if (typeof it.call_id === 'string' && !str(it.type).endsWith('_output')) {
      const target = toolTarget(it);
      calls.set(it.call_id, `${str(it.name) || 'the tool'}${target ? ` · ${oneLine(target, 60)}` : ''}`);
    }
  }
  return items.map((i) => itemBlock(i, agentName, calls)).join('\n\n');
}

/** A read-only document: a heading, a note, then the items as a conversation. */
export function conversationDocument(heading: string, items: readonly Item[], opts: { source?: string; note?: string } = {}): string {
  const lines = [`# ${heading}`, ''];
  if (opts.note) lines.push(opts.note, '');
  lines.push(items.length ? conversationMarkdown(items, opts.source) : 'No items.', '');
  return lines.join('\n');
}
