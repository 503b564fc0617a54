/**
 * Whether a list field's value, not an array, gives the same items each time it is read, so
 * the app's resolvers may be given it as it is. GraphQL takes any iterable for a list; the
 * library reads a one-shot one (a generator, a `Map`'s `values()`) once, and its resolvers and
 * GraphQL are given the array that was read, as nothing could read it again. A `Set` or a typed
 * array is read again alike, and a `@ResolveField()` reads it as the collection it is
 * (`post.tags.size`, `post.nums.byteLength`): given the read array it answered `null` at the
 * first call, and the replay, given the kept `Set`, answered 2 (adversary 114). Only built-in
 * collections are known to read again without running the app's code; any other iterable (a
 * class's own `[Symbol.iterator]()`) is read once, as ever.
 */
export function rereadableList(value: unknown): boolean {
  if (typeof value !== 'object' || value === null) return false;
  if (value instanceof Set || value instanceof Map) return true;
  return ArrayBuffer.isView(value) && !(value instanceof DataView);
}
