/**
 * Where an object type's fields sit on a resolver's value: under their schema names and under
 * the class properties Nest reads them by (`@Field(() => Author, { name: 'author' }) writer`
 * is read as `writer`). An object's own data under either is a field's, never data beside the
 * fields (`__parent`, `__kept`): kept as such, a replay would write the raw value over the
 * field's stored one (adversary 99: an `Author`'s getter `fullName` lost, `data: null`).
 */

/** Each field's schema name and, where Nest reads it elsewhere, its property. */
export function fieldPlaces(
  names: Iterable<string>,
  propertyOf: (name: string) => string | undefined,
): Set<string> {
  const places = new Set<string>();
  for (const name of names) {
    places.add(name);
    const property = propertyOf(name);
    if (property !== undefined) places.add(property);
  }
  return places;
}

/**
 * Whether data kept beside the fields (`__parent`, `__kept`), named `name`, is written on a
 * replay's rebuilt object, where `fromFields` are the places its stored fields were written
 * to under their Nest properties (a renamed field's). Fields win: such data never replaces a
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
