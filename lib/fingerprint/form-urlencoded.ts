/**
 * The canonical form of an `application/x-www-form-urlencoded` body, for fingerprints: its
 * parameters, as JSON is canonicalized by its value. Clients are free to list parameters in
 * any order and to spell a byte as `%41` or `A`, a space as `+` or `%20`; none of that changes
 * what the app receives, so none of it changes the fingerprint. What does change it: a name or
 * a value (byte for byte, after decoding), and the relative order of parameters that share a
 * name (`a=1&a=2` is the list `[1, 2]` to the app, not `[2, 1]`).
 *
 * Decoding follows the WHATWG URL standard's form parsing (what `URLSearchParams`, `qs` and
 * `fast-querystring` agree on), but on bytes: `URLSearchParams` would decode `%FF` and `%FE`
 * alike to U+FFFD, and two different requests would hash the same.
 */

/** Tells this form apart from any JSON text (which never starts with NUL) of the same bytes. */
const FORM_TAG = '\0form\0';

const AMPERSAND = 0x26;
const EQUALS = 0x3d;
const PLUS = 0x2b;
const PERCENT = 0x25;
const SPACE = 0x20;

function hexValue(code: number): number {
  if (code >= 0x30 && code <= 0x39) return code - 0x30;
  if (code >= 0x61 && code <= 0x66) return code - 0x57;
  if (code >= 0x41 && code <= 0x46) return code - 0x37;
  return -1;
}

/**
 * Decodes `+` and `%XX` of one name or value into its bytes, written as a latin1 string (one
 * character per byte, so that the bytes are compared and serialized exactly). A `%` not
 * followed by two hex digits stays as it is, as the standard says.
 */
function decode(bytes: Buffer, start: number, end: number): string {
  let out = '';
  for (let i = start; i < end; i++) {
    const byte = bytes[i];
    if (byte === PLUS) {
      out += String.fromCharCode(SPACE);
    } else if (byte === PERCENT && i + 2 < end) {
      const high = hexValue(bytes[i + 1]);
      const low = hexValue(bytes[i + 2]);
      if (high < 0 || low < 0) {
        out += '%';
        continue;
      }
      out += String.fromCharCode((high << 4) | low);
      i += 2;
    } else {
      out += String.fromCharCode(byte);
    }
  }
  return out;
}

/** The parameters of a form body, decoded, in the order they were sent. */
export function formParameters(body: Buffer | string): [name: string, value: string][] {
  const bytes = typeof body === 'string' ? Buffer.from(body, 'utf8') : body;
  const parameters: [string, string][] = [];
  let start = 0;
  while (start <= bytes.length) {
    let end = bytes.indexOf(AMPERSAND, start);
    if (end === -1) end = bytes.length;
    // Empty sequences (`a=1&&b=2`, a trailing `&`) are no parameter at all.
    if (end > start) {
      let equals = bytes.indexOf(EQUALS, start);
      if (equals === -1 || equals > end) equals = end;
      parameters.push([decode(bytes, start, equals), decode(bytes, equals + 1, end)]);
    }
    start = end + 1;
  }
  return parameters;
}

/**
 * The canonical text of a form body: its parameters sorted by name (byte order), those of one
 * name in the order they were sent. It is meant to be hashed, not parsed again.
 */
export function canonicalForm(body: Buffer | string): string {
  const parameters = formParameters(body);
  // Array.prototype.sort is stable: parameters of one name keep their relative order.
  parameters.sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0));
  return FORM_TAG + JSON.stringify(parameters);
}
