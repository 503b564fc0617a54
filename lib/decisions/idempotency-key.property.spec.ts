import fc from 'fast-check';
import { parseIdempotencyKey } from './idempotency-key.js';
import { normalizeTenantId } from './tenant-id.js';

const visibleAscii = (s: string) => /^[\x21-\x7e]+$/.test(s);
// eslint-disable-next-line no-control-regex -- the alphabet under test
const CONTROL = /[\u0000-\u001f\u007f-\u009f]/;

describe('keys and tenants accept exactly their alphabet', () => {
  it('a bare key is taken iff it is 1 to 255 visible ASCII characters', () => {
    fc.assert(
      fc.property(
        fc.oneof(fc.string({ maxLength: 300 }), fc.string({ unit: 'binary', maxLength: 40 })),
        (raw) => {
          const key = raw.trim();
          // The quoted form is the draft's, with its own rules; bare keys here.
          fc.pre(!(key.startsWith('"') && key.endsWith('"') && key.length >= 2));
          const parsed = parseIdempotencyKey(raw);
          const valid = key.length >= 1 && key.length <= 255 && visibleAscii(key);
          expect(parsed.kind).toBe(valid ? 'key' : 'invalid');
          if (parsed.kind === 'key') expect(parsed.key).toBe(key);
        },
      ),
    );
  });

  it('the quoted form "K" is the key K, for any visible ASCII K without quotes or backslashes', () => {
    fc.assert(
      fc.property(fc.stringMatching(/^[\x21\x23-\x5b\x5d-\x7e]{1,255}$/), (key) => {
        expect(parseIdempotencyKey(`"${key}"`)).toEqual({ kind: 'key', key });
      }),
    );
  });

  it('a tenant id string is taken exactly as it is iff 1 to 255 characters, not all white space, without control ones, well-formed', () => {
    // Any UTF-16 code unit, so lone surrogates too (PostgreSQL would store them as U+FFFD).
    const codeUnit = fc.oneof(
      fc.string({ unit: 'binary', minLength: 1, maxLength: 1 }),
      fc.integer({ min: 0xd800, max: 0xdfff }).map((c) => String.fromCharCode(c)),
    );
    fc.assert(
      fc.property(fc.string({ unit: codeUnit, maxLength: 300 }), (raw) => {
        const valid =
          raw.trim().length >= 1 &&
          raw.length <= 255 &&
          !CONTROL.test(raw) &&
          !/[\uD800-\uDBFF](?![\uDC00-\uDFFF])|(?<![\uD800-\uDBFF])[\uDC00-\uDFFF]/.test(raw);
        expect(normalizeTenantId(raw)).toBe(valid ? raw : undefined);
      }),
    );
  });
});
