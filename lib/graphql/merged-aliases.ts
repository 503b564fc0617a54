import { FIELD_NOT_STORED } from './not-stored-field.js';
import { defineOwn } from './own-member.js';

/**
 * One field selected under several response keys inside a replayed middleware output (`call:
 * contact { phone } mail: contact { email }`): the first answer stored each alias as its own
 * object, by response key, but GraphQL's default resolver reads one value for all of them, by
 * the field's name. Each alias's stored object is rebuilt with its own selection, then the
 * rebuilt values are merged into that one value (adversary 83): each alias then reads the
 * fields it selected, as the first answer gave them.
 */

/**
 * Which stored response key answers each selected response key (see `storedSubkey`), and the
 * field's other stored keys (`others`: the first call's other aliases of the same field, its
 * name and arguments), each with every selected node: a retry that groups the fields
 * otherwise (`a: contact { phone email }` after `a: contact { phone } b: contact { email }`)
 * reads each field from the alias that stored it once the values are merged (adversaries 84,
 * 86).
 */
export function aliasGroups<Node>(
  asked: readonly string[],
  nodes: readonly Node[],
  own: (responseKey: string) => boolean,
  fallback: () => string | undefined,
  others: readonly string[] = [],
): { storedKey: string | undefined; nodes: Node[] }[] {
  const groups = new Map<string | undefined, Node[]>();
  asked.forEach((responseKey, i) => {
    // Its own stored object where the first call stored it; else the field's stored key.
    const storedKey = own(responseKey) ? responseKey : fallback();
    const group = groups.get(storedKey) ?? [];
    group.push(nodes[i]);
    groups.set(storedKey, group);
  });
  for (const other of others) if (!groups.has(other)) groups.set(other, [...nodes]);
  return [...groups].map(([storedKey, grouped]) => ({ storedKey, nodes: grouped }));
}

/**
 * Two rebuilt values of one field merged: objects field by field, lists item by item, deeply;
 * a value over a field the alias's first call did not select (`field_not_stored`); otherwise
 * the first (a scalar, a stored error, a null: both aliases read the same field of the same
 * object, so they agree but where a field under one of them failed). `first` is changed: the
 * rebuilt values are the replay's own, and an object's member marks (see replayed-member.ts)
 * stay on it.
 */
export function mergedAnswers(first: unknown, second: unknown): unknown {
  if (first === undefined || notStored(first)) return second === undefined ? first : second;
  if (second === undefined || notStored(second)) return first;
  // One alias nulled by an error under it, the other answered: the error put where it was,
  // read only by the aliases whose selection reaches it (adversary 86).
  const placed = errorPlaced(first, second) ?? errorPlaced(second, first);
  if (placed !== undefined) return placed;
  if (Array.isArray(first) && Array.isArray(second)) {
    for (let i = 0; i < second.length; i++) first[i] = mergedAnswers(first[i], second[i]);
    return first;
  }
  if (plainObject(first) && plainObject(second)) {
    for (const name of Object.keys(second)) {
      const merged = hasOwn(first, name) ? mergedAnswers(first[name], second[name]) : second[name];
      defineOwn(first, name, merged);
    }
    return first;
  }
  return first;
}

function notStored(value: unknown): boolean {
  return (
    value instanceof Error &&
    (value as { extensions?: { code?: unknown } }).extensions?.code === FIELD_NOT_STORED
  );
}

function hasOwn(value: object, name: string): boolean {
  return Object.prototype.hasOwnProperty.call(value, name);
}

function plainObject(value: unknown): value is Record<string, unknown> {
  if (typeof value !== 'object' || value === null) return false;
  const prototype = Object.getPrototypeOf(value) as unknown;
  return prototype === Object.prototype || prototype === null;
}

/** The steps under a rebuilt null of the error that nulled it, as the rebuilt values read. */
const errorSteps = new WeakMap<Error, readonly (string | number)[]>();

/**
 * Marks `error`, an alias's rebuilt value (its stored null), as made by an error under it at
 * `steps` (field names and indexes, as the rebuilt values hold them, never response keys).
 */
export function markErrorUnder(error: Error, steps: readonly (string | number)[]): Error {
  if (steps.length > 0) errorSteps.set(error, steps);
  return error;
}

/**
 * `value` (another alias's rebuilt object) with `error` at the steps it was under, where
 * `error` is so marked and `value` holds every step above it but not the last (the alias
 * that failed selected it; this one did not): GraphQL throws it where the failed alias reads
 * it, nulling that alias as the first answer did. Undefined otherwise.
 */
function errorPlaced(error: unknown, value: unknown): unknown {
  if (!(error instanceof Error)) return undefined;
  const steps = errorSteps.get(error);
  if (!steps || !(plainObject(value) || Array.isArray(value))) return undefined;
  let at: unknown = value;
  for (const step of steps.slice(0, -1)) {
    const next: unknown = (at as Record<string | number, unknown>)[step];
    if (!(plainObject(next) || Array.isArray(next))) return undefined;
    at = next;
  }
  const last = steps[steps.length - 1];
  const container = at as Record<string | number, unknown>;
  if (Object.prototype.hasOwnProperty.call(container, last)) return undefined;
  container[last] = error;
  return value;
}
