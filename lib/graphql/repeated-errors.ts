/**
 * The errors a replayed middleware field throws again because an ancestor of it was nulled by
 * that error at the first answer (middleware-outputs.ts, `nulled`): where the replay makes the
 * same error again itself (the mutation's own stored error, thrown again by its replayed
 * value), graphql-js records both, and the answer lists it twice where the first answer
 * listed it once (adversary 84). Marked here, and dropped at the answer hook where the same
 * error (message and path) is also answered by another; kept where it is not (an error under
 * a field the app resolves, not stored, may not recur).
 */
const repeated = new WeakSet<object>();

/** Marks `error` as a copy a middleware field threw again (see above). */
export function noteRepeated(error: object): void {
  repeated.add(error);
}

/** An answered error as the hook sees it: graphql-js's, its thrown error under it. */
export interface RawError {
  message?: unknown;
  path?: readonly (string | number)[];
  originalError?: unknown;
}

/**
 * The indexes of `errors` to drop: each a marked copy (itself, or what it wraps) whose
 * message and path another error that is no marked copy also has. Empty where none.
 */
export function repeatedCopies(errors: readonly RawError[]): Set<number> {
  const marked = (error: RawError) =>
    repeated.has(error as object) ||
    (typeof error.originalError === 'object' &&
      error.originalError !== null &&
      repeated.has(error.originalError));
  const sameAs = (error: RawError) => `${String(error.message)}\u0000${JSON.stringify(error.path)}`;
  const answered = new Set(errors.filter((error) => !marked(error)).map(sameAs));
  const drop = new Set<number>();
  errors.forEach((error, i) => {
    if (marked(error) && answered.has(sameAs(error))) drop.add(i);
  });
  return drop;
}
