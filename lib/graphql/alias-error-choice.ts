/**
 * Which stored alias's error a retry's response key answers, inside a replayed middleware
 * output where one field's aliases were each nulled by an error of their own under it
 * (alias-errors.ts). A retry that renames the aliases (`x: contact { phone email }` for the
 * first call's `a:`) or swaps their selections falls, by response key, in another alias's
 * group, or all in the first's (adversary 90): each is answered the error whose field under
 * the alias it selects (the `email` error by the alias selecting `email`), as GraphQL
 * answering it from the same data would; else its own group's, as before. Where it selects
 * the failed fields of several (a retry merging `a:` and `b:` into `x: contact { phone age
 * email }`), the first in its own selection's order: graphql-js completes an object's fields
 * in order and stops at the first non-null error (adversary 93: the stored order answered
 * `email`'s error where GraphQL answers `age`'s).
 */

/** A stored alias's error: the first step under the alias it was at, and whose group it is. */
export interface AliasErrorCandidate {
  /** The error's first path step under its alias (the field that failed, or holds it). */
  step: string | number | undefined;
  /** Whether the retry's response key fell in this alias's group. */
  own: boolean;
}

/**
 * The index in `candidates` of the error the response key answers: the one whose step comes
 * first in `selected` (its sub-fields' response keys and names, in its selection's order;
 * among candidates with that step, the first stored), else its own group's; undefined where
 * neither.
 */
export function aliasErrorChoice(
  selected: readonly string[],
  candidates: readonly AliasErrorCandidate[],
): number | undefined {
  for (const key of selected) {
    const bySelection = candidates.findIndex((candidate) => candidate.step === key);
    if (bySelection >= 0) return bySelection;
  }
  const own = candidates.findIndex((candidate) => candidate.own);
  return own >= 0 ? own : undefined;
}
