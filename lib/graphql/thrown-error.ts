import * as nestCommon from '@nestjs/common';
import { HttpException } from '@nestjs/common';
import { type FieldError } from './field-answer.js';
import { sourceAt } from './error-location.js';
import { noteOwnLocations } from './jit-located.js';
import { type GraphqlModule } from './graphql-module.js';
import { takesStoredProp } from './error-props.js';
import { defineOwn } from './own-member.js';

/**
 * The error a replay throws for a stored one: of the kind that was thrown first, with its
 * message, name and extensions, so that the app's exception filters, Nest's Apollo driver
 * (which renders an `HttpException` by its status and response) and the driver's formatter
 * write the same `errors` entry as for the first answer.
 */
export function thrownError(stored: FieldError, graphql: GraphqlModule): Error {
  const extensions = withHttpHeaders(stored);
  if (stored.kind === 'graphql') return graphqlErrorAgain(stored, extensions, graphql);
  const error =
    stored.kind === 'http' && stored.http
      ? new HttpException(
          stored.http.response as string | Record<string, unknown>,
          stored.http.status,
        )
      : new Error(stored.message);
  // Thrown first as one of Nest's own exceptions (`ConflictException`): of that class again,
  // so that a filter that catches it (`@Catch(ConflictException)`) catches the replay too. An
  // app's own subclass cannot be made again: its filter is told as `HttpException`'s.
  if (error instanceof HttpException && stored.name && stored.nestClass) {
    const nestClass = nestExceptionClass(stored.name);
    if (nestClass) Object.setPrototypeOf(error, nestClass.prototype);
  }
  error.message = stored.message;
  if (stored.name) error.name = stored.name;
  if (stored.props) {
    // Never over what an `HttpException` is made of (its response and status); defined, not
    // assigned: an own `__proto__` comes back an own key (see `takesStoredProp`).
    for (const [name, value] of Object.entries(stored.props)) {
      if (takesStoredProp(error, name)) defineOwn(error, name, value);
    }
  }
  if (extensions) Object.assign(error, { extensions });
  // Mercurius answers with the first error's statusCode.
  if (stored.statusCode !== undefined) Object.assign(error, { statusCode: stored.statusCode });
  return error;
}

/**
 * A stored `GraphQLError` made again where the first one was: its own `path`, and its own
 * `locations` through a `source` and `positions` that give them (see `sourceAt`), which
 * graphql-js' `locatedError` keeps over the field's.
 */
function graphqlErrorAgain(
  stored: FieldError,
  extensions: Record<string, unknown> | undefined,
  graphql: GraphqlModule,
): Error {
  const place = stored.locations ? sourceAt(stored.locations) : undefined;
  const error = new graphql.GraphQLError(stored.message, {
    extensions,
    path: stored.path,
    source: place && new graphql.Source(place.body),
    positions: place?.positions,
  });
  // graphql-jit locates it at the field: see jit-located.ts.
  if (stored.locations) noteOwnLocations(error, stored.locations);
  return error;
}

/** The stored extensions, with their `http.headers` a `Map` again, as Apollo Server reads it. */
export function withHttpHeaders(stored: FieldError): Record<string, unknown> | undefined {
  if (!stored.httpHeaders) return stored.extensions;
  const extensions = { ...stored.extensions };
  const http =
    typeof extensions.http === 'object' && extensions.http !== null ? extensions.http : {};
  extensions.http = { ...http, headers: new Map(stored.httpHeaders) };
  return extensions;
}

/** One of `@nestjs/common`'s `HttpException` classes, by its name, if it is one. */
function nestExceptionClass(name: string): (new (...args: never[]) => HttpException) | undefined {
  const exported = (nestCommon as Record<string, unknown>)[name];
  return typeof exported === 'function' &&
    exported !== HttpException &&
    (exported as { prototype?: unknown }).prototype instanceof HttpException
    ? (exported as new (...args: never[]) => HttpException)
    : undefined;
}
