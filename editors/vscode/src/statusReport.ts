/**
 * `ctxd/status` as a short Markdown page ("ctxd: Show Status"): settings problems first, each with
 * where it comes from, then the tokenizers, the followed agents and the trust verdict. Pure.
 */
import { agentOf } from './agents';
import type { StatusResult } from './protocol';

function line(s: string): string {
  return s.replace(/\r?\n/g, ' ');
}

/** A tokenizer's state in words. */
const TOKENIZER_STATES: Record<string, string> = {
  exact: 'loaded; counts are exact',
  loading: 'loading; counts are estimated until it is ready',
  unavailable: 'could not be loaded; counts are estimated',
  estimate: 'counts are estimated (no exact counter for this model)',
  idle: 'not needed yet (no thread uses it)',
};

/** Format drift, as ctxd/sessions/drift.py says it: "Codex 0.171.0 wrote 3 kinds of record ctxd does not read". */
export function unreadSentence(agent: string, u: { version: string | null; kinds: string[] }): string {
  const name = line(agentOf(agent).name) + (u.version ? ` ${line(u.version)}` : '');
  const n = u.kinds.length;
  return `${name} wrote ${n} kind${n === 1 ? '' : 's'} of record ctxd does not read`;
}

export function statusMarkdown(s: StatusResult): string {
  const out = [`# ctxd ${line(s.version)} (protocol ${s.protocolVersion})`, ''];
  out.push('## Problems', '');
  if (s.problems.length === 0) out.push('None.');
  for (const p of s.problems) out.push(`- **${line(p.source)}${p.key ? ` \`${line(p.key)}\`` : ''}**: ${line(p.message)}`);
  out.push('', '## Token counting', '');
  if (s.tokenizers.length === 0) out.push('No tokenizer loaded yet.');
  for (const t of s.tokenizers) out.push(`- ${line(t.name)}: ${TOKENIZER_STATES[t.status] ?? line(t.status)}`);
  out.push('', '## Followed agents', '');
  if (s.sources.length === 0) out.push('None.');
  for (const src of s.sources) {
    out.push(`- ${line(agentOf(src.agent).name)}: ${src.enabled ? `${src.sessions} sessions` : 'off'} (${line(src.root)})`);
    for (const u of src.unread ?? []) out.push(`  - ${unreadSentence(src.agent, u)}: ${u.kinds.map(line).join(', ')}`);
  }
  out.push(
    '',
    '## Workspace',
    '',
    `- Trusted: ${s.trusted ? 'yes' : 'no (settings that reach off the machine are ignored)'}`,
    `- State folder: ${line(s.stateDir)}`,
    '',
  );
  return out.join('\n');
}
