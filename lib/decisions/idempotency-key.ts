import { MAX_KEY_LENGTH } from '../shapes/idempotency.constants.js';
import { isWellFormedText, longerThan } from './well-formed.js';

/** The outcome of reading the key header: expected outcomes are values, not exceptions. */
export type KeyParseResult =
  { kind: 'key'; key: string } | { kind: 'missing' } | { kind: 'invalid'; reason: string };

function isVisibleAscii(value: string): boolean {
  for (let i = 0; i < value.length; i++) {
    const c = value.charCodeAt(i);
    if (c < 0x21 || c > 0x7e) return false;
  }
  return true;
}

/**
 * Unwraps an RFC 8941 sf-string (`"abc"`, with `\"` and `\\` escapes), the form the IETF
 * draft sends. Returns undefined when the quoting is malformed.
 */
function unquoteSfString(value: string): string | undefined {
  let out = '';
  for (let i = 1; i < value.length - 1; i++) {
    const ch = value[i];
    if (ch === '"') return undefined;
    if (ch === '\\') {
      const next = value[++i];
      if (i >= value.length - 1 || (next !== '"' && next !== '\\')) return undefined;
      out += next;
    } else {
      out += ch;
    }
  }
  return out;
}

/**
 * Reads an idempotency key from the header value Node.js gives: the bare form `abc` or the
 * draft's structured-field string `"abc"` (one key, the quotes removed). A key is 1 to 255
 * visible ASCII characters.
 *
 * @example parseIdempotencyKey('"order-42"') // { kind: 'key', key: 'order-42' }
 */
export function parseIdempotencyKey(header: string | string[] | undefined): KeyParseResult {
  if (header === undefined) return { kind: 'missing' };
  if (Array.isArray(header)) {
    return header.length === 1
      ? parseIdempotencyKey(header[0])
      : { kind: 'invalid', reason: 'it was sent more than once' };
  }
  // Node.js trims the optional white space around a header value; a caller may not.
  let key = header.trim();
  if (key.length >= 2 && key.charCodeAt(0) === 0x22 && key.charCodeAt(key.length - 1) === 0x22) {
    const unquoted = unquoteSfString(key);
    if (unquoted === undefined) {
      return { kind: 'invalid', reason: 'it is not a valid quoted string' };
    }
    key = unquoted;
  }
  if (key.length === 0) return { kind: 'invalid', reason: 'it is empty' };
  if (longerThan(key, MAX_KEY_LENGTH)) {
    return { kind: 'invalid', reason: `it is longer than ${MAX_KEY_LENGTH} characters` };
  }
  // Refused by the ASCII rule too; said apart because a JSON body's "\ud800" reaches here.
  if (!isWellFormedText(key)) {
    return { kind: 'invalid', reason: 'it holds a lone surrogate (not Unicode)' };
  }
  if (!isVisibleAscii(key)) {
    return { kind: 'invalid', reason: 'it must be visible ASCII characters only (no spaces)' };
  }
  return { kind: 'key', key };
}
