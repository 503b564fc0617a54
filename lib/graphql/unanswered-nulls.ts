/**
 * A middleware field the first answer gave as null with no error entry at or under its path:
 * Mercurius writes an `AggregateError` a middleware threw as one entry per inner error, none
 * with a path (adversary 90), so the answer does not tell which field failed. Stored as a
 * plain null, every replay would answer a made-up null, the reason gone. What its middleware
 * threw (its result rejected: the library's wrapper noted it) is then its error, at its path.
 */

/**
 * The keys of `nulls` (middleware fields the answer holds as null) that no answered error is
 * at or under (`errorKeys`, each relative as they are), in their order.
 */
export function unansweredNulls(
  nulls: readonly string[],
  errorKeys: readonly string[],
  isAtOrUnder: (key: string, output: string) => boolean,
): string[] {
  return nulls.filter((key) => !errorKeys.some((at) => isAtOrUnder(at, key)));
}
