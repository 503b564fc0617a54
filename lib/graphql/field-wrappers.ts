/**
 * Which schema fields the library may put a wrapper on (adversary 111): only one whose own
 * `resolve` it wraps. A field with none (a schema-first field) is read by the executor's field
 * resolver, which may be the app's own (Apollo Server's `fieldResolver` option, a
 * `graphql.execute({ fieldResolver })`); no resolver the library could call reaches it, and a
 * `resolve` set on the field would replace it for every operation of the app, idempotent or
 * not, for good. Such a field is left as the app made it, and goes without what the wrapper
 * would have answered (see docs/guides/graphql.md, "one object at several places").
 */
export function wrapsField(field: { resolve?: unknown }): boolean {
  return typeof field.resolve === 'function';
}
