/** Where in a document a GraphQL error points: graphql-js' `SourceLocation`, 1-based. */
export interface ErrorLocation {
  line: number;
  column: number;
}

/**
 * A document's text and the offsets in it at which graphql-js locates the given lines and
 * columns (`getLocation`).
 *
 * A replayed `GraphQLError` is made anew, without the first error's `nodes`: graphql-js would
 * locate it at the field (`locatedError` falls back to the field's nodes). Given a `source`
 * and `positions` instead, it computes the first answer's `locations` from them, and
 * `locatedError` passes them on, whatever the replay's path: the same `locations` as the
 * first answer's (adversary 74). The text is spaces and line breaks only: no part of any
 * query is kept or shown.
 */
export function sourceAt(locations: readonly ErrorLocation[]): {
  body: string;
  positions: number[];
} {
  const lines = Math.max(...locations.map(({ line }) => line));
  const width = Math.max(...locations.map(({ column }) => column));
  // Every line as long as the widest column: each (line, column) is then inside the text.
  const lineLength = width;
  const body = Array.from({ length: lines }, () => ' '.repeat(lineLength)).join('\n');
  const positions = locations.map(({ line, column }) => (line - 1) * (lineLength + 1) + column - 1);
  return { body, positions };
}

/** The error's `locations`, when they are graphql-js' own: a list of 1-based lines and columns. */
export function errorLocations(value: unknown): ErrorLocation[] | undefined {
  if (!Array.isArray(value) || value.length === 0) return undefined;
  const valid = value.every(
    (item: unknown) =>
      typeof item === 'object' &&
      item !== null &&
      isPositiveInteger((item as ErrorLocation).line) &&
      isPositiveInteger((item as ErrorLocation).column),
  );
  return valid
    ? (value as ErrorLocation[]).map(({ line, column }) => ({ line, column }))
    : undefined;
}

/** The error's own `path`, when it is a response path: names and list indexes. */
export function errorPath(value: unknown): (string | number)[] | undefined {
  if (!Array.isArray(value) || value.length === 0) return undefined;
  const valid = value.every(
    (item: unknown) =>
      typeof item === 'string' || (Number.isInteger(item) && (item as number) >= 0),
  );
  return valid ? [...(value as (string | number)[])] : undefined;
}

function isPositiveInteger(value: unknown): boolean {
  return Number.isInteger(value) && (value as number) >= 1;
}

/** An entry of an operation's answered `errors`, as a driver holds it (JSON, or a `toJSON()`). */
export interface AnsweredEntry {
  message?: unknown;
  path?: readonly (string | number)[];
  locations?: unknown;
  toJSON?(): unknown;
}

/**
 * The `locations` the operation's answer gave the error of the field at `path` (its entry
 * told by its path and message), as the client got them. A driver may locate it otherwise than
 * the thrown error's own: under Mercurius' `jit`, graphql-jit locates every resolver's error
 * at the field, so a first answer run compiled is stored with those, never the argument its
 * `nodes` named (adversary 75b). Undefined where no entry tells.
 */
export function answeredLocations(
  errors: readonly AnsweredEntry[] | undefined,
  path: readonly (string | number)[],
  message: string,
): ErrorLocation[] | undefined {
  const entry = errors?.find(
    (error) =>
      error.message === message &&
      error.path?.length === path.length &&
      error.path.every((key, i) => key === path[i]),
  );
  if (!entry) return undefined;
  const json = (entry.toJSON?.() as AnsweredEntry | undefined) ?? entry;
  return errorLocations(json.locations ?? entry.locations);
}
