import { isDeepStrictEqual } from 'node:util';

/** What a leaf's scalar does, as a stored leaf is rebuilt with it (see `leafAgain`). */
export interface LeafScalar {
  parseValue(value: unknown): unknown;
  serialize(value: unknown): unknown;
}

/**
 * A stored output's leaf (as the answer wrote it) as the field's value again, for GraphQL to
 * write with the scalar's `serialize()`: through its `parseValue()` where that is written as
 * the stored form again (a `DateTime`'s string back to a `Date`); else the stored form itself
 * where it is written as it is (a scalar that normalizes input, `parseValue()` of
 * `"+1 (555) 010-9999"` giving `"+15550109999"`, writes a stored value as it is: adversary
 * 90); else as before, through `parseValue()` (or the stored form where that refuses it).
 */
export function leafAgain(scalar: LeafScalar, wire: unknown): unknown {
  let parsed: unknown;
  try {
    parsed = scalar.parseValue(wire);
  } catch {
    return wire;
  }
  if (writes(scalar, parsed, wire) || !writes(scalar, wire, wire)) return parsed;
  return wire;
}

/** Whether `serialize(value)` is `wire` (JSON's: a `toJSON()` written as JSON writes it). */
function writes(scalar: LeafScalar, value: unknown, wire: unknown): boolean {
  try {
    const written = scalar.serialize(value);
    return isDeepStrictEqual(asJson(written), wire);
  } catch {
    return false;
  }
}

function asJson(value: unknown): unknown {
  if (typeof value === 'bigint') return value.toString();
  const text = JSON.stringify(value);
  return text === undefined ? undefined : (JSON.parse(text) as unknown);
}
