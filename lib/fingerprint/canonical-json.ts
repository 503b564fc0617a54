import { type JsonLimits } from '../shapes/json-limits.js';
export { type JsonLimits } from '../shapes/json-limits.js';
/**
 * Canonical JSON for idempotency-key fingerprints.
 *
 * A retried request is recognised by hashing its body, so two bodies that mean the same thing must
 * produce the same bytes to hash, and two bodies that mean different things must not. Clients (and
 * proxies in between) are free to reorder object members, change white space, re-escape strings or
 * re-spell numbers (`1`, `1.0`, `10e-1`), so hashing the raw text would reject honest retries.
 * Re-serialising with `JSON.stringify(JSON.parse(text))` is not good enough either: it goes through
 * IEEE-754 doubles, so `12345678901234567890` and `12345678901234567891` would collapse into one
 * value and a different request would be treated as a replay. RFC 8785 (JCS) has the same problem
 * with numbers, so only its key ordering is borrowed here.
 *
 * The canonical form produced by both exported functions:
 * - objects: members sorted by key, comparing UTF-16 code units (plain `<` on JS strings, as
 *   RFC 8785 does), written `{"a":1e0,"b":2e0}` with no white space;
 * - arrays: order kept, `[1e0,2e0]`;
 * - strings: `JSON.stringify` of the decoded string, so `"\u0041"` and `"A"` are the same;
 * - `true`, `false`, `null` as is;
 * - numbers: the exact decimal value, written `<sign><digits>e<exponent>` where `digits` has
 *   neither leading nor trailing zeros (`100` → `1e2`, `-12.50` → `-125e-1`, `0.001` → `1e-3`);
 *   every zero, including `-0`, is written `0`. Nothing is rounded, and exponents of any size are
 *   supported.
 *
 * The output is itself valid JSON, but it is meant to be hashed, not parsed again.
 */

/** Maximum nesting of arrays and objects; keeps the recursive descent off the end of the stack. */
const MAX_DEPTH = 512;

/** The bounds of the exported functions when none are given: the most the parser allows. */
export const MAX_JSON_LIMITS: JsonLimits = { maxDepth: MAX_DEPTH, maxNumberDigits: 1000 };

/** Exponents with at most this many digits are summed as doubles; the sum stays below 2^53. */
const MAX_EXACT_EXPONENT_DIGITS = 15;

const TAB = 0x09;
const LINE_FEED = 0x0a;
const CARRIAGE_RETURN = 0x0d;
const SPACE = 0x20;
const QUOTE = 0x22;
const PLUS = 0x2b;
const COMMA = 0x2c;
const MINUS = 0x2d;
const DOT = 0x2e;
const SLASH = 0x2f;
const DIGIT_0 = 0x30;
const DIGIT_1 = 0x31;
const DIGIT_9 = 0x39;
const COLON = 0x3a;
const UPPER_E = 0x45;
const LEFT_BRACKET = 0x5b;
const BACKSLASH = 0x5c;
const RIGHT_BRACKET = 0x5d;
const LOWER_B = 0x62;
const LOWER_E = 0x65;
const LOWER_F = 0x66;
const LOWER_N = 0x6e;
const LOWER_R = 0x72;
const LOWER_T = 0x74;
const LOWER_U = 0x75;
const LEFT_BRACE = 0x7b;
const RIGHT_BRACE = 0x7d;

/**
 * Thrown by {@link canonicalizeJsonText} when the body is not strict RFC 8259 JSON, is nested more
 * than 512 levels deep, or repeats an object key. A body that cannot be canonicalised cannot be
 * fingerprinted, so callers should reject the request (typically with 400/422) rather than guess.
 */
export class InvalidJsonError extends Error {
  override readonly name = 'InvalidJsonError';

  /** Zero-based UTF-16 offset into the input where the problem was detected. */
  readonly position: number;

  constructor(message: string, position: number) {
    super(`${message} at position ${position}`);
    this.position = position;
  }
}

/**
 * Canonicalises JSON text, e.g. a raw request body, for fingerprinting.
 *
 * Parsing is strict RFC 8259 (no comments, trailing commas, leading zeros, `NaN`, single quotes…)
 * because a lenient parser would make the fingerprint depend on its guesses. Duplicate object keys
 * are rejected rather than resolved: parsers disagree on which duplicate wins, so such a body is
 * ambiguous. Strings are kept as JS strings (lone surrogates are allowed, escapes are decoded).
 * Numbers are normalised from their source text, never through a double, so no precision is lost.
 *
 * The parser is a single left-to-right pass using `charCodeAt`, builds the canonical text directly
 * (no token list or intermediate value tree) and caps nesting at 512 levels.
 *
 * @throws InvalidJsonError if `text` is not a single valid JSON value surrounded by optional white
 *   space, is nested deeper than 512 levels, or contains an object with a repeated key.
 */
export function canonicalizeJsonText(text: string, limits: JsonLimits = MAX_JSON_LIMITS): string {
  if (typeof text !== 'string') {
    throw new TypeError(`Expected JSON text as a string, got ${typeof text}`);
  }
  const parser = new Parser(text, limits);
  const canonical = parser.value(0);
  parser.skipWhitespace();
  if (parser.pos < text.length) {
    throw new InvalidJsonError('Unexpected data after the JSON value', parser.pos);
  }
  return canonical;
}

/**
 * Canonicalises an already-parsed value (what a body parser produced) into the same form as
 * {@link canonicalizeJsonText}, so a fingerprint does not depend on which of the two was available.
 *
 * Values are read the way `JSON.stringify` reads them: `toJSON` is called (e.g. `Date`), boxed
 * primitives are unwrapped, only own enumerable string keys are used, object members that are
 * `undefined`, functions or symbols are skipped and such array elements become `null`. Numbers are
 * normalised from `String(n)`, so `canonicalizeValue(v)` equals
 * `canonicalizeJsonText(JSON.stringify(v))` whenever the latter succeeds. Differences from
 * `JSON.stringify`: bigints are accepted (as exact integers) and non-finite numbers throw instead
 * of silently becoming `null`, which would make `NaN` and `null` the same request.
 *
 * Note that a JS number has already lost the digits a double cannot hold; use
 * {@link canonicalizeJsonText} on the raw body when it is available.
 *
 * @throws TypeError for non-finite numbers, for a top-level `undefined`, function or symbol, and
 *   for nesting deeper than 512 levels (which is also how cycles are caught).
 */
export function canonicalizeValue(value: unknown, limits: JsonLimits = MAX_JSON_LIMITS): string {
  const canonical = serialize(value, '', 0, limits, { keys: 0 });
  if (canonical === undefined) {
    throw new TypeError(`Cannot canonicalize a value of type ${typeof value}`);
  }
  return canonical;
}

interface Member {
  /** Decoded key; sorting and duplicate detection use this, not the escaped spelling. */
  key: string;
  /** Canonical text of the member's value. */
  value: string;
  /** Offset of the key in the JSON text, for error reporting (0 for parsed values). */
  position: number;
}

function compareMembers(a: Member, b: Member): number {
  return a.key < b.key ? -1 : a.key > b.key ? 1 : 0;
}

/** Sorts members by key (UTF-16 code units) and writes the canonical object text. */
function writeObject(members: Member[]): string {
  // Array.prototype.sort is stable, so of two equal keys the later one in the text comes second.
  members.sort(compareMembers);
  let out = '{';
  for (let i = 0; i < members.length; i++) {
    const member = members[i];
    if (i > 0) {
      if (member.key === members[i - 1].key) {
        throw new InvalidJsonError(
          `Duplicate object key ${JSON.stringify(member.key)}`,
          member.position,
        );
      }
      out += ',';
    }
    out += JSON.stringify(member.key) + ':' + member.value;
  }
  return out + '}';
}

function isDigit(code: number): boolean {
  return code >= DIGIT_0 && code <= DIGIT_9;
}

function hexValue(code: number): number {
  if (code >= 0x30 && code <= 0x39) return code - 0x30;
  if (code >= 0x61 && code <= 0x66) return code - 0x57;
  if (code >= 0x41 && code <= 0x46) return code - 0x37;
  return -1;
}

/**
 * Writes the exact decimal value of a validated JSON number, given the bounds of its integer,
 * fraction and exponent digits in `text`, as `<sign><digits>e<exponent>` (or `0`).
 */
function normalizeNumber(
  text: string,
  negative: boolean,
  intStart: number,
  intEnd: number,
  fracStart: number,
  fracEnd: number,
  expNegative: boolean,
  expStart: number,
  expEnd: number,
): string {
  // First significant digit: skip leading zeros of the integer part, then of the fraction.
  let first = intStart;
  while (first < intEnd && text.charCodeAt(first) === DIGIT_0) first++;
  if (first === intEnd) {
    first = fracStart;
    while (first < fracEnd && text.charCodeAt(first) === DIGIT_0) first++;
    if (first === fracEnd) return '0';
  }

  // Last significant digit, and how far it sits from the units position (`shift`).
  let digits: string;
  let shift: number;
  let last = fracEnd - 1;
  while (last >= fracStart && text.charCodeAt(last) === DIGIT_0) last--;
  if (last >= fracStart) {
    digits =
      first < intEnd
        ? text.slice(first, intEnd) + text.slice(fracStart, last + 1)
        : text.slice(first, last + 1);
    shift = fracStart - 1 - last;
  } else {
    // The fraction is all zeros, so a non-zero digit exists in the integer part.
    last = intEnd - 1;
    while (text.charCodeAt(last) === DIGIT_0) last--;
    digits = text.slice(first, last + 1);
    shift = intEnd - 1 - last;
  }

  // Explicit exponent; |shift| is bounded by the text length, so only the exponent can be huge.
  let e = expStart;
  while (e < expEnd && text.charCodeAt(e) === DIGIT_0) e++;
  let exponent: string;
  if (expEnd - e <= MAX_EXACT_EXPONENT_DIGITS) {
    let magnitude = 0;
    for (; e < expEnd; e++) magnitude = magnitude * 10 + (text.charCodeAt(e) - DIGIT_0);
    exponent = String(expNegative ? shift - magnitude : shift + magnitude);
  } else {
    const magnitude = BigInt(text.slice(e, expEnd));
    exponent = String(expNegative ? BigInt(shift) - magnitude : BigInt(shift) + magnitude);
  }

  return (negative ? '-' : '') + digits + 'e' + exponent;
}

/** Recursive-descent parser that emits canonical text instead of building values. */
class Parser {
  pos = 0;
  /** Object members seen so far, against `limits.maxKeys`. */
  private keys = 0;

  constructor(
    private readonly text: string,
    private readonly limits: JsonLimits = MAX_JSON_LIMITS,
  ) {}

  skipWhitespace(): void {
    const text = this.text;
    let pos = this.pos;
    for (;;) {
      const c = text.charCodeAt(pos);
      if (c !== SPACE && c !== LINE_FEED && c !== CARRIAGE_RETURN && c !== TAB) break;
      pos++;
    }
    this.pos = pos;
  }

  /** Parses one value; `depth` is the number of arrays/objects that enclose it. */
  value(depth: number): string {
    this.skipWhitespace();
    const c = this.text.charCodeAt(this.pos);
    switch (c) {
      case LEFT_BRACE:
        return this.object(depth + 1);
      case LEFT_BRACKET:
        return this.array(depth + 1);
      case QUOTE:
        return JSON.stringify(this.string());
      case LOWER_T:
        return this.literal('true');
      case LOWER_F:
        return this.literal('false');
      case LOWER_N:
        return this.literal('null');
      default:
        if (c === MINUS || isDigit(c)) return this.number();
        throw this.unexpected('Expected a JSON value');
    }
  }

  private object(depth: number): string {
    if (depth > this.limits.maxDepth) {
      throw new InvalidJsonError(`Nesting deeper than ${this.limits.maxDepth} levels`, this.pos);
    }
    const text = this.text;
    this.pos++;
    this.skipWhitespace();
    if (text.charCodeAt(this.pos) === RIGHT_BRACE) {
      this.pos++;
      return '{}';
    }
    const members: Member[] = [];
    for (;;) {
      if (text.charCodeAt(this.pos) !== QUOTE) throw this.unexpected('Expected a string key');
      const position = this.pos;
      if (++this.keys > (this.limits.maxKeys ?? Infinity)) {
        throw new InvalidJsonError(`More than ${this.limits.maxKeys} object keys`, position);
      }
      const key = this.string();
      this.skipWhitespace();
      if (text.charCodeAt(this.pos) !== COLON) throw this.unexpected("Expected ':'");
      this.pos++;
      members.push({ key, value: this.value(depth), position });
      this.skipWhitespace();
      const c = text.charCodeAt(this.pos);
      if (c === COMMA) {
        this.pos++;
        this.skipWhitespace();
      } else if (c === RIGHT_BRACE) {
        this.pos++;
        return writeObject(members);
      } else {
        throw this.unexpected("Expected ',' or '}'");
      }
    }
  }

  private array(depth: number): string {
    if (depth > this.limits.maxDepth) {
      throw new InvalidJsonError(`Nesting deeper than ${this.limits.maxDepth} levels`, this.pos);
    }
    const text = this.text;
    this.pos++;
    this.skipWhitespace();
    if (text.charCodeAt(this.pos) === RIGHT_BRACKET) {
      this.pos++;
      return '[]';
    }
    let out = '[';
    for (;;) {
      out += this.value(depth);
      this.skipWhitespace();
      const c = text.charCodeAt(this.pos);
      if (c === COMMA) {
        this.pos++;
        out += ',';
      } else if (c === RIGHT_BRACKET) {
        this.pos++;
        return out + ']';
      } else {
        throw this.unexpected("Expected ',' or ']'");
      }
    }
  }

  /** Parses a string starting at its opening quote and returns it decoded. */
  private string(): string {
    const text = this.text;
    const length = text.length;
    const open = this.pos;
    let pos = open + 1;
    let chunkStart = pos;
    let out = '';
    for (;;) {
      if (pos >= length) throw new InvalidJsonError('Unterminated string', open);
      const c = text.charCodeAt(pos);
      if (c === QUOTE) {
        this.pos = pos + 1;
        return out + text.slice(chunkStart, pos);
      }
      if (c === BACKSLASH) {
        out += text.slice(chunkStart, pos);
        switch (text.charCodeAt(pos + 1)) {
          case QUOTE:
            out += '"';
            break;
          case BACKSLASH:
            out += '\\';
            break;
          case SLASH:
            out += '/';
            break;
          case LOWER_B:
            out += '\b';
            break;
          case LOWER_F:
            out += '\f';
            break;
          case LOWER_N:
            out += '\n';
            break;
          case LOWER_R:
            out += '\r';
            break;
          case LOWER_T:
            out += '\t';
            break;
          case LOWER_U: {
            const unit =
              (hexValue(text.charCodeAt(pos + 2)) << 12) |
              (hexValue(text.charCodeAt(pos + 3)) << 8) |
              (hexValue(text.charCodeAt(pos + 4)) << 4) |
              hexValue(text.charCodeAt(pos + 5));
            // Any invalid digit is -1, which sets the sign bit of the combined value.
            if (unit < 0) throw new InvalidJsonError('Invalid \\u escape', pos);
            out += String.fromCharCode(unit);
            pos += 4;
            break;
          }
          default:
            throw new InvalidJsonError('Invalid escape sequence', pos);
        }
        pos += 2;
        chunkStart = pos;
      } else if (c < SPACE) {
        throw new InvalidJsonError('Unescaped control character in string', pos);
      } else {
        pos++;
      }
    }
  }

  private literal(word: 'true' | 'false' | 'null'): string {
    if (!this.text.startsWith(word, this.pos)) throw this.unexpected('Expected a JSON value');
    this.pos += word.length;
    return word;
  }

  /** Parses `-? (0 | [1-9][0-9]*) (. [0-9]+)? ([eE] [+-]? [0-9]+)?` and normalises it. */
  number(): string {
    const text = this.text;
    let pos = this.pos;
    const negative = text.charCodeAt(pos) === MINUS;
    if (negative) pos++;

    const intStart = pos;
    const lead = text.charCodeAt(pos);
    if (lead === DIGIT_0) {
      pos++;
    } else if (lead >= DIGIT_1 && lead <= DIGIT_9) {
      do pos++;
      while (isDigit(text.charCodeAt(pos)));
    } else {
      throw new InvalidJsonError('Expected a digit', pos);
    }
    const intEnd = pos;

    let fracStart = pos;
    let fracEnd = pos;
    if (text.charCodeAt(pos) === DOT) {
      pos++;
      fracStart = pos;
      if (!isDigit(text.charCodeAt(pos))) {
        throw new InvalidJsonError('Expected a digit after the decimal point', pos);
      }
      do pos++;
      while (isDigit(text.charCodeAt(pos)));
      fracEnd = pos;
    }

    let expNegative = false;
    let expStart = pos;
    let expEnd = pos;
    const marker = text.charCodeAt(pos);
    if (marker === LOWER_E || marker === UPPER_E) {
      pos++;
      const sign = text.charCodeAt(pos);
      if (sign === PLUS || sign === MINUS) {
        expNegative = sign === MINUS;
        pos++;
      }
      expStart = pos;
      if (!isDigit(text.charCodeAt(pos))) {
        throw new InvalidJsonError('Expected a digit in the exponent', pos);
      }
      do pos++;
      while (isDigit(text.charCodeAt(pos)));
      expEnd = pos;
    }

    const { maxNumberDigits } = this.limits;
    if (intEnd - intStart + (fracEnd - fracStart) > maxNumberDigits) {
      throw new InvalidJsonError(`A number with more than ${maxNumberDigits} digits`, this.pos);
    }
    if (expEnd - expStart > maxNumberDigits) {
      throw new InvalidJsonError(
        `A number whose exponent has more than ${maxNumberDigits} digits`,
        this.pos,
      );
    }
    this.pos = pos;
    return normalizeNumber(
      text,
      negative,
      intStart,
      intEnd,
      fracStart,
      fracEnd,
      expNegative,
      expStart,
      expEnd,
    );
  }

  private unexpected(expected: string): InvalidJsonError {
    if (this.pos >= this.text.length) {
      return new InvalidJsonError(`${expected}, found end of input`, this.pos);
    }
    const found = JSON.stringify(this.text[this.pos]);
    return new InvalidJsonError(`${expected}, found ${found}`, this.pos);
  }
}

/** Canonical number text for a JS number or bigint, via the same normalisation as JSON text. */
function normalizeJsNumber(n: number | bigint, limits: JsonLimits): string {
  // String(n) always matches the JSON number grammar (e.g. "-1.5e-7", "1e+21", "123").
  return new Parser(String(n), limits).number();
}

/**
 * Canonical text for a parsed value, or `undefined` where `JSON.stringify` would omit it.
 * `key` is what `toJSON` receives; `depth` is the number of enclosing arrays/objects.
 */
function serialize(
  input: unknown,
  key: string | number,
  depth: number,
  limits: JsonLimits,
  seen: { keys: number },
): string | undefined {
  let value = input;
  if ((typeof value === 'object' && value !== null) || typeof value === 'bigint') {
    const toJSON = (value as { toJSON?: unknown }).toJSON;
    if (typeof toJSON === 'function') value = toJSON.call(value, String(key));
  }
  if (typeof value === 'object' && value !== null) {
    if (value instanceof Number) value = Number(value);
    else if (value instanceof String) value = String(value);
    else if (value instanceof Boolean || value instanceof BigInt) value = value.valueOf();
  }

  switch (typeof value) {
    case 'string':
      return JSON.stringify(value);
    case 'number':
      if (!Number.isFinite(value)) {
        // A number too large for a double (`1e400`) arrives as Infinity from a body parser:
        // its value is lost, so the request cannot be told apart from another.
        throw new InvalidJsonError(`A number that is not finite (${value})`, 0);
      }
      return normalizeJsNumber(value, limits);
    case 'bigint':
      return normalizeJsNumber(value, limits);
    case 'boolean':
      return value ? 'true' : 'false';
    case 'undefined':
    case 'function':
    case 'symbol':
      return undefined;
  }
  if (value === null) return 'null';

  if (depth >= limits.maxDepth) {
    throw new InvalidJsonError(`Nesting deeper than ${limits.maxDepth} levels (or a cycle)`, 0);
  }
  if (Array.isArray(value)) {
    let out = '[';
    for (let i = 0; i < value.length; i++) {
      if (i > 0) out += ',';
      out += serialize(value[i], i, depth + 1, limits, seen) ?? 'null';
    }
    return out + ']';
  }
  const record = value as Record<string, unknown>;
  const keys = Object.keys(record);
  seen.keys += keys.length;
  if (seen.keys > (limits.maxKeys ?? Infinity)) {
    throw new InvalidJsonError(`More than ${limits.maxKeys} object keys`, 0);
  }
  const members: Member[] = [];
  for (let i = 0; i < keys.length; i++) {
    const memberKey = keys[i];
    const memberValue = serialize(record[memberKey], memberKey, depth + 1, limits, seen);
    // Object.keys never repeats a key, so writeObject's duplicate check cannot fire here.
    if (memberValue !== undefined) {
      members.push({ key: memberKey, value: memberValue, position: 0 });
    }
  }
  return writeObject(members);
}
