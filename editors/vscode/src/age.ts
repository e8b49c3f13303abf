/** Times as people read them ("5 min ago"), from the daemon's ISO strings or epoch numbers. Pure. */

/** Epoch milliseconds of an ISO string, epoch seconds or epoch milliseconds. */
export function toMillis(t: string | number | null | undefined): number {
  if (t === null || t === undefined) return 0;
  if (typeof t === 'number') return t < 1e11 ? t * 1000 : t;
  const parsed = Date.parse(t);
  return Number.isNaN(parsed) ? 0 : parsed;
}

/** "just now", "5 min ago", "3 h ago", "2 days ago". */
export function formatAge(t: string | number | null | undefined, now: number): string {
  // The protocol allows a snapshot or thread without a time (`createdAt: null`).
  if (t === null || t === undefined || toMillis(t) === 0) return 'time unknown';
  const seconds = Math.max(0, Math.round((now - toMillis(t)) / 1000));
  if (seconds < 45) return 'just now';
  const minutes = Math.round(seconds / 60);
  if (minutes < 60) return `${minutes} min ago`;
  const hours = Math.round(minutes / 60);
  if (hours < 24) return `${hours} h ago`;
  const days = Math.round(hours / 24);
  return days === 1 ? '1 day ago' : `${days} days ago`;
}
