import { type FieldNode } from 'graphql';

/**
 * The places of one object in a mutation's answer, and what a read of its field gives at each
 * (adversary 110). One object answered at two places (an order's `primary` line, also
 * `lines[0]`, as an ORM loads a relation and its collection) is ONE object to the app's
 * resolvers, at the first call as on a replay: `line.order.lines.indexOf(line)` finds it. But
 * GraphQL reads a getter field at each place (a signed URL signs afresh per read), so one
 * object may answer a field otherwise at each place; the library reads it once per place,
 * stores each place's read, and answers each place its own (placed-reads.ts).
 */

/**
 * An object's place in the answer: its response path from the operation's root, each step a
 * list index or the response keys that name the field there (a field selected under several
 * aliases is stored once, by its name, and its object read once for all of them; a getter's
 * leaf field is read once per alias, each answered to its key: alias-reads.ts).
 */
export type Place = readonly (readonly string[] | number)[];

/** The place of a field's value under the place of its parent, by the field's nodes. */
export function fieldPlace(parent: Place, nodes: readonly FieldNode[]): Place {
  const keys = [...new Set(nodes.map((node) => node.alias?.value ?? node.name.value))];
  return [...parent, keys];
}

/** The place GraphQL tells of a resolver (`info.path`'s keys, from the root). */
export function placeOfPath(path: readonly (string | number)[]): Place {
  return path.map((key) => (typeof key === 'number' ? key : [key]));
}

/** Whether `place` is the response path `path` (keys and indexes from the root). */
export function isPlace(place: Place, path: readonly (string | number)[]): boolean {
  if (place.length !== path.length) return false;
  return place.every((step, index) => {
    const key = path[index];
    return typeof step === 'number' ? step === key : typeof key === 'string' && step.includes(key);
  });
}

/**
 * What a later place's read of an object's field (`later`) does to what the object answers
 * (`earlier`: the first place's read, if a place read it): `'add'` where no earlier place
 * read it (the object answers it from then on: a getter selected at `lines[0]` only);
 * `'same'` where it gave the same; `'placed'` where it gave another value (a signed URL's
 * second signature, a list read again): the object keeps answering the first read, and that
 * place answers its own.
 */
export function laterRead(
  earlier: { value: unknown } | undefined,
  later: unknown,
): 'add' | 'same' | 'placed' {
  if (!earlier) return 'add';
  return Object.is(earlier.value, later) ? 'same' : 'placed';
}

/**
 * What a replay's node answers for a member, or what a later place's object holds for it
 * (`value`: the data, or the getter that gives it, never run here), and whether it is a stored
 * answer (`stored`: a read, or a read that failed) or only tells that the first call did not
 * store it (a field a retry selects at this place only: not-stored-field.ts).
 */
export interface HeldMember {
  value: unknown;
  stored: boolean;
}

/**
 * What a later place's member (`later`) does to the one node a replay adopts at each place of
 * one object (`earlier`: what the node answers for it, its own or through its getters'
 * prototype, whichever holds it; adversary 111: a comparison with its own members only let a
 * later place's shadow the first's). As `laterRead`, plus: `'replace'` where the node answers
 * "not stored" and this place stored it (a retry selecting the field at one more place than
 * the first call did): the node takes the stored one, the earlier places keep their "not
 * stored" as their own reads. A "not stored" never replaces anything: a later place without
 * the field answers that at its place only.
 */
export function laterHeld(
  earlier: HeldMember | undefined,
  later: HeldMember,
): 'add' | 'same' | 'placed' | 'replace' {
  if (!earlier) return 'add';
  if (!earlier.stored && !later.stored) return 'same';
  if (Object.is(earlier.value, later.value)) return 'same';
  return !earlier.stored && later.stored ? 'replace' : 'placed';
}
