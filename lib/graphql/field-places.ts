/**
 * Where an object type's fields sit on a resolver's value: at the class properties Nest reads
 * them by, and nowhere else (`@Field(() => Author, { name: 'author' }) writer` is read as
 * `writer`; its schema name is only the name it has on the wire). An object's own data at a
 * field's property is that field's, never data beside the fields (`__parent`, `__kept`): kept
 * as such, a replay would write the raw value over the field's stored one (adversary 99: an
 * `Author`'s getter `fullName` lost, `data: null`). Its own data at any other key, a renamed
 * field's schema name included, is data beside the fields (adversary 100: a `@HideField() id`
 * beside `@Field(() => ID, { name: 'id' }) uuid`, which a `@ResolveField()` reads as `post.id`).
 */

/** Each field's place: its property where Nest reads it by one, else its schema name. */
export function fieldPlaces(
  names: Iterable<string>,
  propertyOf: (name: string) => string | undefined,
): Set<string> {
  const places = new Set<string>();
  for (const name of names) places.add(propertyOf(name) ?? name);
  return places;
}

/** The schema names of the fields Nest reads by another property (renamed with `{ name }`). */
export function renamedFieldNames(
  names: Iterable<string>,
  propertyOf: (name: string) => string | undefined,
): Set<string> {
  const renamed = new Set<string>();
  for (const name of names) {
    const property = propertyOf(name);
    if (property !== undefined && property !== name) renamed.add(name);
  }
  return renamed;
}

/**
 * Which member keeps an object's own data `name` that is no field's place: `KEPT` (all of it
 * for a class a serializer reads, and its own `__typename`) or `PARENT`. Own data under a
 * renamed field's schema name is always `PARENT`'s, which holds own data by its key only:
 * `KEPT` holds a field's raw value by its schema name too (an `ID` that was a number), which a
 * replay writes at the field's property, so such data kept there would be read as the field's.
 */
export function besideFieldsMember(
  name: string,
  byClass: boolean,
  renamedNames: ReadonlySet<string>,
): 'kept' | 'parent' {
  if (renamedNames.has(name)) return 'parent';
  return byClass || name === '__typename' ? 'kept' : 'parent';
}

/**
 * Whether data kept beside the fields (`__parent`, `__kept`), named `name`, is written on a
 * replay's rebuilt object, where `fromFields` are the places its stored fields were written
 * to (their Nest properties: a renamed field's, never its schema name). Fields win: such data never replaces a
 * stored field's value, but `undefined` (the input of a field with a `defaultValue`, which
 * Nest fills in again on the replay as on the first call: adversary 90).
 */
export function writesBesideFields(
  name: string,
  item: unknown,
  fromFields: ReadonlySet<string>,
): boolean {
  return item === undefined || !fromFields.has(name);
}
