import { type ErrorLocation } from './error-location.js';
import { pathOf } from './stored-at-answer.js';

/**
 * A replayed `GraphQLError` answered where the first one was, under Mercurius' `jit`.
 *
 * graphql-js keeps a resolver's `GraphQLError` where it points (`locatedError` passes on its
 * own `source` and `positions`), and a replay's error is made with those of the first
 * answer's `locations` (see error-location.ts). graphql-jit, which Mercurius' `jit` runs a
 * document on from its second run (a replay's, as a rule), wraps every resolver error in one
 * of its own located at the field's nodes, and Mercurius formats it so before its
 * `onResolution` hook: the replay would point at the field, not where the first answer did
 * (adversary 75). So a replay notes, on its operation's context, where its error belongs, and
 * the hook puts the first answer's `locations` back in that field's entry.
 */

/** The replay's errors made to carry the first answer's own `locations` (`graphqlErrorAgain`). */
const ownLocations = new WeakMap<object, readonly ErrorLocation[]>();

/** Where on its operation's context the replays' errors with own locations are noted. */
const NOTED = Symbol('idempotency.ownLocated');

/** A replay's error with its own locations, as its operation answers it. */
export interface OwnLocated {
  /** The field's path in the answer (where every driver answers a resolver's error). */
  readonly path: readonly (string | number)[];
  readonly message: string;
  readonly locations: readonly ErrorLocation[];
  /**
   * Its own path, where it is not the field's: a middleware field's stored error under its
   * output (an item of its list), thrown at the field (see replayed-field-error.ts).
   */
  readonly ownPath?: readonly (string | number)[];
}

/** Notes a replay's error made with the first answer's own `locations`. */
export function noteOwnLocations(error: object, locations: readonly ErrorLocation[]): void {
  ownLocations.set(error, locations);
}

/** Notes a replay's error located at its own place, thrown at the field at `path`. */
export function noteOwnLocated(context: unknown, located: OwnLocated): void {
  if (typeof context !== 'object' || context === null) return;
  ((context as { [NOTED]?: OwnLocated[] })[NOTED] ??= []).push(located);
}

/**
 * The replay's answer, its error (one made with its own locations) noted on the operation's
 * `context` at the field's path (`info`), for `locatedAsFirst`.
 */
export async function notingOwnLocated<T>(
  answer: Promise<T>,
  context: unknown,
  info: unknown,
): Promise<T> {
  try {
    return await answer;
  } catch (error) {
    const locations = typeof error === 'object' && error !== null && ownLocations.get(error);
    if (locations) {
      noteOwnLocated(context, { path: pathOf(info), message: (error as Error).message, locations });
    }
    throw error;
  }
}

/** The replays' errors noted on the operation's context (`notingOwnLocated`). */
export function ownLocatedOf(context: unknown): readonly OwnLocated[] {
  return (context as { [NOTED]?: OwnLocated[] } | null)?.[NOTED] ?? [];
}

/** An entry of an answer's `errors`, as the driver holds it (JSON, or with a `toJSON()`). */
export interface ErrorEntry {
  message?: unknown;
  path?: readonly (string | number)[];
  locations?: unknown;
}

/**
 * The answer's errors with each noted replay's entry (its path and message) answering the
 * first answer's `locations` and its own path, if it has one (made by `entryOf`, with them in
 * place of the driver's); the others as they are. Undefined where nothing changes.
 */
export function locatedAsFirst<E extends ErrorEntry>(
  errors: readonly E[] | undefined,
  noted: readonly OwnLocated[],
  entryOf: (
    entry: E,
    locations: readonly ErrorLocation[],
    path?: readonly (string | number)[],
  ) => E,
): E[] | undefined {
  if (!errors || noted.length === 0) return undefined;
  let changed = false;
  const answer = errors.map((entry) => {
    const own = noted.find(
      (replay) => replay.message === entry.message && samePath(replay.path, entry.path),
    );
    if (!own) return entry;
    const moved = own.ownPath !== undefined && !samePath(own.ownPath, entry.path);
    if (!moved && sameLocations(own.locations, entry.locations)) return entry;
    changed = true;
    return moved ? entryOf(entry, own.locations, own.ownPath) : entryOf(entry, own.locations);
  });
  return changed ? answer : undefined;
}

function samePath(
  a: readonly (string | number)[],
  b: readonly (string | number)[] | undefined,
): boolean {
  return b !== undefined && a.length === b.length && a.every((key, i) => key === b[i]);
}

function sameLocations(own: readonly ErrorLocation[], answered: unknown): boolean {
  return (
    Array.isArray(answered) &&
    answered.length === own.length &&
    own.every(
      ({ line, column }, i) =>
        (answered[i] as ErrorLocation)?.line === line &&
        (answered[i] as ErrorLocation)?.column === column,
    )
  );
}
