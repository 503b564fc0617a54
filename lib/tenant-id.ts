import { type TenantId } from './idempotency-options.interface.js';

const MAX_INT64 = 9223372036854775807n;
const MIN_INT64 = -9223372036854775808n;
const INTEGER = /^-?\d{1,19}$/;

/**
 * Normalizes what the tenant resolver returned to the text of a 64-bit integer (the design's
 * `bigint tenant_id`), or undefined when it is not one.
 */
export function normalizeTenantId(value: TenantId | undefined | null): string | undefined {
  let big: bigint;
  if (typeof value === 'number') {
    if (!Number.isSafeInteger(value)) return undefined;
    big = BigInt(value);
  } else if (typeof value === 'bigint') {
    big = value;
  } else if (typeof value === 'string') {
    const text = value.trim();
    if (!INTEGER.test(text)) return undefined;
    big = BigInt(text);
  } else {
    return undefined;
  }
  return big >= MIN_INT64 && big <= MAX_INT64 ? big.toString() : undefined;
}
