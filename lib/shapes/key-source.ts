import { type IdempotencyRequest } from './idempotency-request.js';

/**
 * Where a route's idempotency key is read (`keyFrom`): another header, a field of the JSON
 * body (a dotted path for a nested one), a function of the request, named for the errors, or,
 * on a GraphQL mutation only, one of the field's arguments.
 *
 * @example
 * @Idempotent({ keyFrom: { header: 'X-Request-Id' } })
 * @Idempotent({ keyFrom: { body: 'meta.requestId' } })
 * @Idempotent({ keyFrom: { name: 'the ?op query parameter', read: (req) => new URL(req.url, 'http://x').searchParams.get('op') ?? undefined } })
 * @Idempotent({ keyFrom: { arg: 'idempotencyKey' } }) // on a @Mutation()
 */
export type IdempotencyKeySource =
  | { header: string }
  | { body: string }
  | { name: string; read: (request: IdempotencyRequest) => unknown }
  | { arg: string };

/** A key source made ready: how to read the raw key, and how errors name where it is. */
export interface KeyReader {
  /** "the Idempotency-Key header", "the requestId field of the body": for error messages. */
  where: string;
  /** The header name, when the key is in a header (OpenAPI documents it). */
  header?: string;
  /**
   * The argument's name, when the key is a GraphQL field's argument: it is read from the
   * field's arguments, not from the request (whose `read` then finds none).
   */
  arg?: string;
  read(request: IdempotencyRequest): RawKey;
}

/** A key as read: a string, a header's repeated values, nothing, or something not a key. */
export type RawKey = string | string[] | undefined | { invalid: string };
