/**
 * A getter field under a resolver the library takes for the app's code (adversary 115): a
 * schema directive's transform (Nest's docs' `@upper`, `mapSchema` wrapping the field's
 * resolver) puts code of its own around a code-first `@Field()`, and the library cannot tell
 * that code from the app's (`fieldResolution(...) === 'app'`), so it neither reads nor stores
 * the field. Such a wrapper reads the field as the default resolver does (`defaultFieldResolver`:
 * the parent's property), and a getter there is no own data: the replay's plain object has no
 * value for it, and the replay answers `undefined` where the first call answered the getter's.
 * So the library reads such a getter itself, once, at its key's turn as graphql-js reads it,
 * gives the wrapper what it read (the first answer's Proxy), and keeps it as the field's input
 * for the replay (`KEPT`), as it keeps a `@ResolveField()`'s own data.
 */

/** What tells whether a field's getter is read under a resolver the library takes for the app's. */
export interface WrappedField {
  /**
   * A `@ResolveField()` of the app's: Nest gives it the parent, never the property, and
   * graphql-js never reads the getter for it.
   */
  readonly resolveField: boolean;
  /** A code-first `@Field()` Nest built from a property of the class (nest-fields.ts). */
  readonly nestField: boolean;
  /** Whether that property reads through a getter (of its class, or its own). */
  readonly getter: boolean;
}

/**
 * Whether the library reads the getter behind a field whose resolver it takes for the app's
 * (see above): only a `@Field()` property's getter, under a resolver that is not a
 * `@ResolveField()` (a schema transform's wrapper, which reads that property as Nest's own read
 * does); own data needs no read (it is kept as any `@ResolveField()`'s input is).
 */
export function readsWrappedGetter(field: WrappedField): boolean {
  return !field.resolveField && field.nestField && field.getter;
}
