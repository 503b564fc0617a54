import { type TenantId } from './idempotency-options.interface.js';

const MAX_INT64 = 9223372036854775807n;
const MIN_INT64 = -9223372036854775808n;
const INTEGER = /^-?\d{1,19}$/;
/** Control characters (C0, DEL, C1): never part of an id, and NUL cannot be stored at all. */
// eslint-disable-next-line no-control-regex -- matching control characters is the point
const CONTROL = /[\u0000-\u001f\u007f-\u009f]/;
/** The longest tenant id kept; ids are scoped keys' first half, not data. */
export const MAX_TENANT_ID_LENGTH = 255;

/**
 * Normalizes what the tenant resolver returned to the text the key is scoped by, or undefined
 * when it is not a usable id. Integers (numbers, bigints, or decimal text within 64 bits) are
 * written in their canonical decimal form, so `42`, `'42'` and `'042'` are one tenant, as they
 * were when tenant ids were a `bigint` column; any other string of 1 to 255 characters without
 * control characters (a UUID, a slug) is taken as it is, white space around it trimmed.
 */
export function normalizeTenantId(value: TenantId | undefined | null): string | undefined {
  if (typeof value === 'number') return Number.isSafeInteger(value) ? String(value) : undefined;
  if (typeof value === 'bigint') return value.toString();
  if (typeof value !== 'string') return undefined;
  const text = value.trim();
  if (INTEGER.test(text)) {
    const big = BigInt(text);
    if (big >= MIN_INT64 && big <= MAX_INT64) return big.toString();
  }
  if (text.length === 0 || text.length > MAX_TENANT_ID_LENGTH || CONTROL.test(text)) {
    return undefined;
  }
  return text;
}
