/** Lone UTF-16 surrogates: no Unicode character, so nothing UTF-8 can carry. */
const LONE_SURROGATES = /[\uD800-\uDBFF](?![\uDC00-\uDFFF])|(?<![\uD800-\uDBFF])[\uDC00-\uDFFF]/g;

/**
 * A text (a handler's error) as a PostgreSQL `text` column can keep it: NUL, which no
 * PostgreSQL text holds, written as the six characters `\u0000`; lone surrogates as U+FFFD;
 * at most `maxLength` UTF-16 units, a cut one ending in `…` (never inside a surrogate pair).
 * A failure whose text could not be stored could not be counted either, and a message whose
 * failures are not counted was redelivered for ever.
 */
export function storableText(text: string, maxLength = 1000): string {
  const safe = text.replaceAll('\u0000', '\\u0000').replace(LONE_SURROGATES, '\uFFFD');
  if (safe.length <= maxLength) return safe;
  const cut = safe.slice(0, maxLength - 1);
  return `${/[\uD800-\uDBFF]$/.test(cut) ? cut.slice(0, -1) : cut}…`;
}
