/** Numbers as people read them (token counts, dollars). Pure. */

/** Compact token count as people read it: 950, 48.2k, 128k, 1.2M. */
export function formatTokens(n: number): string {
  const value = Math.max(0, Math.round(n));
  if (value < 1000) return String(value);
  if (value < 999_950) return `${trimZero((value / 1000).toFixed(1))}k`;
  return `${trimZero((value / 1_000_000).toFixed(1))}M`;
}

function trimZero(s: string): string {
  return s.endsWith('.0') ? s.slice(0, -2) : s;
}

/** Dollars as people read them: $0.17, $12.40, "under $0.01". */
export function usd(n: number): string {
  if (n > 0 && n < 0.005) return 'under $0.01';
  return `$${n.toFixed(2)}`;
}
