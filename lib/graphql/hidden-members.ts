/**
 * An object's own data that is not enumerable (`Object.defineProperty(line, 'order', { value:
 * order })`: the JavaScript way to keep a back-reference out of `JSON.stringify` and of every
 * copy, so that a row with a cycle can still be logged) is data a resolver reads as any other
 * (`line.order.lines.indexOf(line)`). Kept only as enumerable data, a replay's parent had no
 * `order`, and a mutation whose work committed answered `data: null` (adversary 111). What
 * this file decides is which own members of an object are kept, and how one is given back.
 */

/** How an own member of an object is kept (see `keptMember`). */
export type KeptMember = 'member' | 'hidden' | 'none';

/**
 * How the own member `descriptor` describes is kept, where the object's own data is kept
 * whatever its enumerability (`hidden`: a plain object or an instance's own data; never an
 * array's `length`, an error's `message` and `stack`, which their nodes say otherwise):
 *
 * - enumerable (data, or an own getter, read as JSON reads it): `member`, as ever;
 * - not enumerable, data: `hidden`, given back not enumerable (its writability too);
 * - not enumerable, a getter or a setter of its own: `none` (a computed member, like a
 *   class's getter, that a copy of the object's data never holds; reading it may load or
 *   throw).
 */
export function keptMember(descriptor: PropertyDescriptor, hidden: boolean): KeptMember {
  if (descriptor.enumerable) return 'member';
  if (!hidden || !('value' in descriptor)) return 'none';
  return 'hidden';
}

/** A hidden member's key as a node writes it: `['-', key, writable]` (see `readMemberKey`). */
export function hiddenKey(written: unknown, writable: boolean): unknown[] {
  return ['-', written, writable ? 1 : 0];
}

/** A node's written key read back: the key as written, and how it is defined again. */
export interface MemberKey {
  written: unknown;
  enumerable: boolean;
  writable: boolean;
}

/**
 * A key as a node wrote it (a string, `['y', name]` for a registered symbol, or `hiddenKey`'s
 * form around either), and how its member is defined again: enumerable and writable, or, for
 * a hidden one, not enumerable and as writable as it was. Always configurable: the library
 * orders and adopts the objects it rebuilds (key-order.ts, parent-identity.ts), which a
 * non-configurable member would refuse; the app's reads and writes see no difference.
 */
export function readMemberKey(written: unknown): MemberKey {
  if (Array.isArray(written) && written[0] === '-') {
    return { written: written[1], enumerable: false, writable: written[2] === 1 };
  }
  return { written, enumerable: true, writable: true };
}
