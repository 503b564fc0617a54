/**
 * Whether a string is well-formed Unicode: no UTF-16 surrogate without its other half. A lone
 * surrogate is no character, so it has no UTF-8 form: PostgreSQL's driver writes it as U+FFFD,
 * where two ids that differ in JavaScript (`"acme\ud800"`, `"acme\udbff"`) become one. Any
 * text the library compares in memory and then stores (a tenant id, a key, a message id) must
 * pass this first, so that the batcher, the cache and the table agree on what is one id.
 */
export function isWellFormedText(text: string): boolean {
  // ES2024 (Node.js 20), typed here while the compiler's lib is ES2022.
  return (text as string & { isWellFormed(): boolean }).isWellFormed();
}

/**
 * How many characters PostgreSQL's `length()` (`char_length`) counts in `text`: its code
 * points, where JavaScript's `length` counts UTF-16 code units (an emoji, a CJK Extension B
 * ideograph: two). Every limit of the library that mirrors a CHECK on a column's length counts
 * this way, so that what the table would keep is never refused, nor the other way round.
 */
export function characterCount(text: string): number {
  let count = 0;
  for (let i = 0; i < text.length; i++) {
    const unit = text.charCodeAt(i);
    // A high surrogate followed by a low one is one character; a lone one counts as one.
    if (unit >= 0xd800 && unit <= 0xdbff && i + 1 < text.length) {
      const next = text.charCodeAt(i + 1);
      if (next >= 0xdc00 && next <= 0xdfff) i++;
    }
    count++;
  }
  return count;
}

/**
 * Whether `text` is over `max` characters as `characterCount` counts them, reading no more than
 * needed: a character is one or two code units, so a text of at most `max` units is not, and
 * one of over `2 * max` is (a 10 MB id is not walked through).
 */
export function longerThan(text: string, max: number): boolean {
  if (text.length <= max) return false;
  if (text.length > 2 * max) return true;
  return characterCount(text) > max;
}

/** `text`'s first `max` characters (code points), never cutting a surrogate pair in two. */
export function firstCharacters(text: string, max: number): string {
  let end = 0;
  for (let taken = 0; taken < max && end < text.length; taken++) {
    const unit = text.charCodeAt(end);
    const next = text.charCodeAt(end + 1);
    end += unit >= 0xd800 && unit <= 0xdbff && next >= 0xdc00 && next <= 0xdfff ? 2 : 1;
  }
  return text.slice(0, end);
}

/**
 * Why PostgreSQL's `text` cannot hold `text` as given (completes "it ..."), or undefined where
 * it can: a NUL fails every statement that carries it (SQLSTATE 22021), and a lone surrogate
 * has no UTF-8 form (stored as U+FFFD, or refused). Any text the library sends for a key (its
 * tenant, its key, an owner's name) is checked first: a statement that fails the same way on
 * every run is no passing failure of the database.
 */
export function unstorableTextProblem(text: string): string | undefined {
  if (text.includes('\u0000')) return 'holds a NUL character';
  if (!isWellFormedText(text)) return 'holds a lone surrogate (not Unicode)';
  return undefined;
}
