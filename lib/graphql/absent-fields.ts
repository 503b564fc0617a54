/**
 * The selected fields an object did not have (`ABSENT` in wire-value.ts). A resolver's object
 * may lack a nullable field the client selects (an optional member left out, as a document
 * store or a JSON API gives it): GraphQL answers it null, and the object has no such key. Its
 * wire form stores the null (what the answer holds, and what a reader of an earlier version
 * writes back); a replay that wrote it onto its parent would give the app's resolvers an own
 * `subtitle: null` the first call's parent did not have, and one reading its parent whole
 * (`JSON.stringify(parent)` hashed into an etag, `Object.keys(parent)`) would answer another
 * value on every replay (adversary 109). So the absent fields are noted, and a replay leaves
 * them off its parent: GraphQL's default resolver reads `undefined` there, and answers null as
 * at first.
 */

/**
 * The absent selected fields to note on the stored object: only where something reads its
 * data (`readsItsData`: the app's resolvers under it, or a serializer outside; the condition
 * under which its key order is stored too), and only where there are any. Elsewhere the
 * replay's own `null` there is read by GraphQL alone, which answers it the same.
 */
export function notedAbsentFields(
  absent: readonly string[],
  readsItsData: boolean,
): string[] | undefined {
  return readsItsData && absent.length > 0 ? [...absent] : undefined;
}

/**
 * The fields a replay leaves off its object, from what was stored (`stored[ABSENT]`): none for
 * a record stored before they were noted (its parent has the stored null, as it always did),
 * and none of what is not a field's name.
 */
export function absentOnReplay(stored: unknown): ReadonlySet<string> {
  if (!Array.isArray(stored)) return new Set();
  return new Set(stored.filter((name): name is string => typeof name === 'string'));
}

/** A field of a parent's type as Nest reads it: its property, and whether a default fills it. */
export interface FieldReading {
  name: string;
  property: string;
  /** Nest fills it with its `defaultValue` where the property is undefined. */
  filled: boolean;
}

/**
 * The fields (of `fields`: those GraphQL reads from the object, never the app's resolvers')
 * that a middleware output's parent lacks (`has`: whether its property is in the object, its
 * class's getters too), as the value's walk tells its absent selected fields (`ABSENT`): a
 * replay rebuilds such a parent from the answer, whose null for them is no member it had
 * (adversary 110). Only a field the first call selected is ever left off a replay's parent
 * (see `outputValue`), so the type's others cost nothing but their names.
 */
export function lackedFields(
  fields: readonly FieldReading[],
  has: (property: string) => boolean,
): string[] {
  return fields.filter((field) => !field.filled && !has(field.property)).map(({ name }) => name);
}
