import { type ServerResponse } from 'node:http';
import { type IdempotencyError } from '../shapes/idempotency.errors.js';

/**
 * The library's own error that `IdempotencyErrorFilter` answered on a response, for the
 * request's owner to read when that answer comes in place of the handler's value: thrown by an
 * app interceptor after it (a `RetryLaterError` from an audit step, the store unreachable from
 * its own write), it says what the answer means ("nothing stored, retry"), which its 503 alone
 * does not tell from a bug's 5xx.
 */
const written = new WeakMap<ServerResponse, IdempotencyError>();

export function noteWrittenLibraryError(raw: ServerResponse, error: IdempotencyError): void {
  written.set(raw, error);
}

export function writtenLibraryError(raw: ServerResponse): IdempotencyError | undefined {
  return written.get(raw);
}

/** Forgets what an earlier run of the request wrote: the owner reads only what came after it. */
export function forgetWrittenLibraryError(raw: ServerResponse): void {
  written.delete(raw);
}
