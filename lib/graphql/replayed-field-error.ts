import { type StoredFieldError } from './field-answer.js';
import { sourceAt } from './error-location.js';
import { type GraphqlModule } from './graphql-module.js';
import { noteOwnLocations } from './jit-located.js';
import { type AnswerPath, isAtOrUnder, keySteps } from './output-paths.js';
import { thrownError, withHttpHeaders } from './thrown-error.js';

/**
 * The stored errors of a middleware field's output, answered again on a replay where the
 * first answer had them (see `StoredFieldError`): at a null of the output (the output itself,
 * or a null in it), the error at that place or under it.
 */

/** An error a replay answers at a null: the stored error, and its steps below that null. */
export interface ErrorUnder {
  error: StoredFieldError;
  steps: (string | number)[];
}

/**
 * The stored error at `key` or under it (the first in the answer's order), with its steps
 * below `key` (list indexes as numbers: a response key is a GraphQL name, never digits).
 */
export function errorUnder(
  errors: Readonly<Record<string, StoredFieldError>>,
  key: string,
): ErrorUnder | undefined {
  for (const [at, error] of Object.entries(errors)) {
    if (!isAtOrUnder(at, key)) continue;
    return { error, steps: keySteps(at.slice(key.length + 1)) };
  }
  return undefined;
}

/**
 * The error made again. At its own place (`path` undefined): what was thrown, of its kind (an
 * `HttpException` as one, for Nest's driver to render by its status), or graphql-js's words;
 * graphql-js locates it there. Under it (`path`, the error's place in the replay's answer): a
 * `GraphQLError` already located there (its path and the first's locations), which graphql-js
 * keeps, thrown at the null it nulled (the first answer's null of a non-null item's list).
 */
export function fieldErrorAgain(
  graphql: GraphqlModule,
  stored: StoredFieldError,
  path: AnswerPath | undefined,
): Error {
  const thrown = stored.thrown && thrownError(stored.thrown, graphql);
  if (!path) {
    return thrown ?? new graphql.GraphQLError(stored.message, { extensions: stored.extensions });
  }
  const place = stored.locations ? sourceAt(stored.locations) : undefined;
  const error = new graphql.GraphQLError(stored.message, {
    path: [...path],
    source: place && new graphql.Source(place.body),
    positions: place?.positions,
    extensions: extensionsAgain(stored),
    originalError: thrown,
  });
  // graphql-jit locates it at the field: see jit-located.ts.
  if (stored.locations) noteOwnLocations(error, stored.locations);
  return error;
}

/**
 * A stored error's `extensions` again: an `extensions.http.headers` that was a `Map` (Apollo
 * Server's status and headers: a `Retry-After`) a `Map` again, from what was thrown, which
 * keeps its entries (JSON made it `{}`); Apollo Server reads only a `Map`.
 */
export function extensionsAgain(stored: StoredFieldError): Record<string, unknown> | undefined {
  if (!stored.thrown?.httpHeaders) return stored.extensions;
  return withHttpHeaders({ ...stored.thrown, extensions: stored.extensions });
}
