/**
 * A list's items as GraphQL completes them: every index from 0 to its `length`, a hole read as
 * `undefined` (GraphQL answers it `null`). `Array.prototype.map` skips holes, so a walk over
 * `list.map(...)` left a hole in its results, and a sparse list (`codes = ['a']; codes[2] =
 * 'c'`, as code that fills an array by index writes it) failed the first call with the
 * library's own TypeError (adversary 114). The result is dense; `list` is left as it is.
 */
export function completedItems<T, R>(
  list: readonly T[],
  each: (item: T | undefined, index: number) => R,
): R[] {
  return Array.from({ length: list.length }, (_, index) => each(list[index], index));
}
