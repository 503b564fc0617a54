/**
 * A middleware field the first answer gave as null, or left out under a null parent, with no
 * error entry at or under that null: Mercurius writes an `AggregateError` a middleware threw
 * as one entry per inner error, none with a path (adversary 90), so the answer does not tell
 * which field failed. Stored as a plain null, every replay would answer a made-up null, the
 * reason gone; left out under its parent's null (a non-null field: its null nulls the
 * parent), every replay would refuse it as a field the first call did not select
 * (`field_not_stored`, adversary 93), telling the client to use a new key: its mutation run
 * twice. What its middleware threw (its result rejected: the library's wrapper noted it) is
 * then its error, at its path, which nulls the same parent on a replay.
 */

/** A middleware field with no value in the answer, and where the answer's null is. */
export interface NullPlace {
  /** The field's key (under the mutation's field). */
  key: string;
  /**
   * The null's key: the field's own, or its nearest null ancestor's under the mutation's field,
   * or `''`: the mutation's field itself (a non-null chain up to a nullable mutation).
   */
  nulledAt: string;
}

/**
 * The key of the null that left out a middleware field at `path` (see `NullPlace.nulledAt`),
 * its nearest null ancestor `end` steps down from the operation's root, under the mutation's
 * field at `rootLength` steps: `''` where that null is the mutation's field itself (adversary
 * 96: a non-null chain up to a nullable mutation), undefined where there is none or it is
 * above the mutation's field (another story: `remadeOutputs`). `path` is under the field.
 */
export function nullKeyOf(
  rootLength: number,
  path: readonly (string | number)[],
  end: number | undefined,
): string | undefined {
  if (end === undefined || end < rootLength || end > path.length) return undefined;
  return path.slice(rootLength, end).join('.');
}

/**
 * The keys of `nulls` (middleware fields the answer holds as null, or under a null) that no
 * answered error is at or under the null of (`errorKeys`, each relative as they are), in their
 * order: an error elsewhere under a nulled parent (a sibling's) is what nulled it, and this
 * field's own never reached the answer.
 */
export function unansweredNulls(
  nulls: readonly NullPlace[],
  errorKeys: readonly string[],
  isAtOrUnder: (key: string, output: string) => boolean,
): string[] {
  return nulls
    .filter(
      ({ nulledAt }) =>
        // At the mutation's field itself: any error under it answers it.
        !errorKeys.some((at) => nulledAt === '' || isAtOrUnder(at, nulledAt)),
    )
    .map(({ key }) => key);
}
