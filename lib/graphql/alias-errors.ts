/**
 * One field selected under several aliases inside a replayed middleware output, each alias
 * nulled at the first answer by an error of its own under it (`a: contact { phone email }` a
 * missing `email`, `b: contact { phone age }` an `age` Int refused): their rebuilt values
 * are two errors, and no one value holds both (merged-aliases.ts keeps the first, which
 * GraphQL then threw for both aliases: adversary 89). The field's value is then a read of the
 * library's, which the wrapper on such fields (`answerAliasRead`, put on by
 * middleware-outputs.ts: Nest's own reader never calls a function it reads) calls with the
 * field's `info`: each alias gets its own error, located where the first answer had it.
 */

/** The reads made here, told from any function an app's data holds. */
const reads = new WeakSet<object>();

/** What a field's resolver gave, with a read of the library's (see above) read for `info`. */
export function answerAliasRead(
  given: unknown,
  args: unknown,
  context: unknown,
  info: unknown,
): unknown {
  return typeof given === 'function' && reads.has(given)
    ? (given as AliasRead)(args, context, info)
    : given;
}

/** What a response key reads: its own error, else `fallback`. */
export type AliasRead = (args: unknown, context: unknown, info: unknown) => unknown;

/**
 * `fallback` where no response key has an error of its own, or where each has `fallback`
 * itself and nothing relocates it; else a read that answers each response key its own error
 * (see above), at its own place (`relocate`), `fallback` for any other. One key is enough
 * (adversary 93: a retry merging two nulled aliases into one, `x`, answered the merged
 * value's error, another field's, at the first call's alias `a`).
 */
export function aliasErrorsRead(
  errors: ReadonlyMap<string, Error>,
  fallback: unknown,
  /** The error at the response key's own place (`info`'s), where it was another's. */
  relocate?: (error: Error, info: unknown) => Error,
): unknown {
  if (errors.size === 0) return fallback;
  if (!relocate && [...errors.values()].every((error) => error === fallback)) return fallback;
  const read: AliasRead = (_args, _context, info) => {
    const key = (info as { path?: { key?: unknown } } | undefined)?.path?.key;
    const error = typeof key === 'string' ? errors.get(key) : undefined;
    if (!error) return fallback;
    return relocate ? relocate(error, info) : error;
  };
  reads.add(read);
  return read;
}
