/**
 * Notifications show their text literally (only `[label](link)` is rendered): Markdown code spans
 * from ctxd's own sentences or the daemon's messages would show their backticks. Pure.
 */

/** `text` with code spans turned into quotes, on one line. */
export function plainText(text: string): string {
  return text
    .replace(/`{1,3}([^`]*)`{1,3}/g, (_, inner: string) => `"${inner}"`)
    .replace(/`/g, "'")
    .replace(/\s*\r?\n\s*/g, ' ')
    .trim();
}

/** A snapshot id as git shows it short. */
export function shortId(id: string): string {
  return id.slice(0, 7);
}
