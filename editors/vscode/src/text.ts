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

/**
 * Text from a conversation or a file name, for a quick pick's label, description or detail: VS Code
 * draws `$(name)` there as an icon, so the `$(` is broken with a zero-width space.
 */
export function noIcons(text: string): string {
  return text.replace(/\$\(/g, '$\u200b(');
}

/** A snapshot id as git shows it short. */
export function shortId(id: string): string {
  return id.slice(0, 7);
}
