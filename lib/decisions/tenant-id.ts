import { type TenantId } from '../shapes/idempotency-options.interface.js';
import { isWellFormedText, longerThan } from './well-formed.js';

const MAX_INT64 = 9223372036854775807n;
const MIN_INT64 = -9223372036854775808n;
/** An integer written canonically: no leading zeros, no `-0`, no sign on zero. */
const CANONICAL_INTEGER = /^(0|-?[1-9]\d{0,18})$/;
/** Control characters (C0, DEL, C1): never part of an id, and NUL cannot be stored at all. */
// eslint-disable-next-line no-control-regex -- matching control characters is the point
const CONTROL = /[\u0000-\u001f\u007f-\u009f]/;
/**
 * The longest tenant id kept, in characters as the keys table's CHECK (`length()`) counts them
 * (code points: `characterCount`); ids are scoped keys' first half, not data.
 */
export const MAX_TENANT_ID_LENGTH = 255;
/**
 * The library's own key spaces, never a request's: BullMQ jobs' (`bullmq:<queue>`) and
 * scheduled tasks' (`schedule:<task>`). A request under one of them could take a job's key or
 * a tick to come before it runs (adversary 60).
 */
export const JOB_TENANT_PREFIX = 'bullmq:';
export const TICK_TENANT_PREFIX = 'schedule:';
export const RESERVED_TENANT_PREFIXES = [JOB_TENANT_PREFIX, TICK_TENANT_PREFIX] as const;

/**
 * Normalizes what the tenant resolver returned to the text the key is scoped by, or undefined
 * when it is not a usable id. A number or a bigint is written in decimal, so `42` and `'42'`
 * are one tenant (as when tenant ids were a `bigint` column); a string is taken exactly as it
 * is, so that two different ids never share a key space (`'0042'` is not `'42'`): 1 to 255
 * characters, not all white space, without control characters, well-formed Unicode (a UUID, a
 * slug, an account number with its leading zeros). A lone surrogate is refused rather than
 * compared: PostgreSQL would store it as U+FFFD, one tenant where the app has two.
 */
export function normalizeTenantId(value: TenantId | undefined | null): string | undefined {
  const reading = readTenantId(value);
  return reading.kind === 'id' ? reading.text : undefined;
}

/** A tenant id as the key is scoped by, or the rule the resolver's value breaks. */
export type TenantIdReading = { kind: 'id'; text: string } | { kind: 'invalid'; rule: string };

/**
 * What `normalizeTenantId` decides, with the rule a refused value breaks, in words for the
 * client's `tenant_invalid` message (the value itself is not repeated: it may be a secret's).
 */
export function readTenantId(value: unknown): TenantIdReading {
  let text: string;
  if (typeof value === 'number') {
    if (!Number.isSafeInteger(value)) {
      return { kind: 'invalid', rule: 'it is a number that is not a safe integer' };
    }
    text = String(value);
  } else if (typeof value === 'bigint') {
    if (value < MIN_INT64 || value > MAX_INT64) {
      return { kind: 'invalid', rule: 'it is an integer outside the 64-bit range' };
    }
    text = value.toString();
  } else if (typeof value === 'string') {
    text = value;
  } else if (value === undefined || value === null) {
    return { kind: 'invalid', rule: 'the app found none for it' };
  } else {
    return { kind: 'invalid', rule: `it is ${article(typeof value)}, not a string or an integer` };
  }
  if (text.length === 0) return { kind: 'invalid', rule: 'it is empty' };
  if (text.trim().length === 0) return { kind: 'invalid', rule: 'it is only white space' };
  if (longerThan(text, MAX_TENANT_ID_LENGTH)) {
    return {
      kind: 'invalid',
      rule: `it is longer than ${MAX_TENANT_ID_LENGTH} characters`,
    };
  }
  if (CONTROL.test(text)) return { kind: 'invalid', rule: 'it holds a control character' };
  if (!isWellFormedText(text)) {
    return {
      kind: 'invalid',
      rule:
        'it holds a lone surrogate (it is not well-formed Unicode), which would be stored ' +
        'as U+FFFD, the same id as another tenant',
    };
  }
  const reserved = RESERVED_TENANT_PREFIXES.find((prefix) => text.startsWith(prefix));
  if (reserved) {
    return {
      kind: 'invalid',
      rule: `it begins with ${reserved}, the library's own key space of ${
        reserved === 'bullmq:' ? 'BullMQ jobs' : 'scheduled tasks'
      }`,
    };
  }
  return { kind: 'id', text };
}

function article(type: string): string {
  return /^[aeiou]/.test(type) ? `an ${type}` : `a ${type}`;
}

/** Whether a tenant id is an integer as the `bigint` column wrote it (for the migration back). */
export function isCanonicalInteger(text: string): boolean {
  return CANONICAL_INTEGER.test(text);
}
