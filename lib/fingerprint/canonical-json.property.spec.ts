import fc from 'fast-check';
import { canonicalizeJsonText, canonicalizeValue, InvalidJsonError } from './canonical-json.js';

/** JSON values with numbers, strings (any Unicode), nesting; what a request body holds. */
const json = fc.jsonValue({ maxDepth: 6 });

/** The same value written another way: keys shuffled at every depth, white space added. */
function respell(value: unknown, seed: number): string {
  let state = seed;
  const random = () => (state = (state * 1103515245 + 12345) % 2147483648) / 2147483648;
  const space = () => [' ', '\n', '\t', ''][Math.floor(random() * 4)];
  const write = (v: unknown): string => {
    if (Array.isArray(v)) return `[${space()}${v.map(write).join(`,${space()}`)}${space()}]`;
    if (v !== null && typeof v === 'object') {
      const entries = Object.entries(v).sort(() => random() - 0.5);
      return `{${entries.map(([k, x]) => `${space()}${JSON.stringify(k)}${space()}:${write(x)}`).join(',')}${space()}}`;
    }
    return `${space()}${JSON.stringify(v)}${space()}`;
  };
  return write(value);
}

/** Whether two JSON values mean the same: numbers by value (0 and -0 alike), keys unordered. */
function sameValue(a: unknown, b: unknown): boolean {
  if (typeof a === 'number' && typeof b === 'number') return a === b;
  if (Array.isArray(a) || Array.isArray(b)) {
    return (
      Array.isArray(a) &&
      Array.isArray(b) &&
      a.length === b.length &&
      a.every((x, i) => sameValue(x, b[i]))
    );
  }
  if (a !== null && b !== null && typeof a === 'object' && typeof b === 'object') {
    const ka = Object.keys(a).sort();
    const kb = Object.keys(b).sort();
    return (
      ka.length === kb.length &&
      ka.every((k, i) => k === kb[i]) &&
      ka.every((k) =>
        sameValue((a as Record<string, unknown>)[k], (b as Record<string, unknown>)[k]),
      )
    );
  }
  return Object.is(a, b);
}

describe('canonical JSON, as properties', () => {
  it('is stable under key order and white space, from text and from parsed values alike', () => {
    fc.assert(
      fc.property(json, fc.integer({ min: 1, max: 2 ** 30 }), (value, seed) => {
        const canonical = canonicalizeValue(value);
        expect(canonicalizeJsonText(respell(value, seed))).toBe(canonical);
        expect(canonicalizeJsonText(JSON.stringify(value))).toBe(canonical);
      }),
    );
  });

  it('is stable under number spelling', () => {
    fc.assert(
      fc.property(fc.bigInt({ min: -(10n ** 30n), max: 10n ** 30n }), fc.nat(5), (n, zeros) => {
        const text = n.toString();
        const spellings = [
          text,
          `${text}.${'0'.repeat(zeros + 1)}`,
          `${text}e0`,
          // Trailing zeros taken back by the exponent (not for 0: JSON has no leading zeros).
          n === 0n ? text : `${text}${'0'.repeat(zeros)}e-${zeros}`,
          `${text}E+0`,
        ];
        const canonical = spellings.map((s) => canonicalizeJsonText(`[${s}]`));
        expect(new Set(canonical).size).toBe(1);
      }),
    );
  });

  it('differs whenever the values differ', () => {
    fc.assert(
      fc.property(json, json, (a, b) => {
        expect(canonicalizeValue(a) === canonicalizeValue(b)).toBe(sameValue(a, b));
      }),
    );
  });

  it('differs for integers a double cannot tell apart', () => {
    fc.assert(
      fc.property(
        fc.bigInt({ min: 2n ** 53n, max: 10n ** 25n }),
        fc.bigInt({ min: 1n, max: 1000n }),
        (n, d) => {
          expect(canonicalizeJsonText(`${n}`)).not.toBe(canonicalizeJsonText(`${n + d}`));
        },
      ),
    );
  });

  it('takes a number of up to 1000 digits in mantissa and exponent, and refuses one more', () => {
    const limits = { maxDepth: 64, maxNumberDigits: 1000 };
    fc.assert(
      fc.property(
        fc.integer({ min: 1, max: 1200 }),
        fc.integer({ min: 1, max: 1200 }),
        (mantissa, exponent) => {
          const text = `1${'7'.repeat(mantissa - 1)}e-${'3'.repeat(exponent)}`;
          const accepted = mantissa <= 1000 && exponent <= 1000;
          if (accepted) expect(() => canonicalizeJsonText(text, limits)).not.toThrow();
          else expect(() => canonicalizeJsonText(text, limits)).toThrow(InvalidJsonError);
        },
      ),
      { numRuns: 60 },
    );
  });
});
