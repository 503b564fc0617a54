import { toProblem } from '../http/problem.js';
import {
  type IdempotencyError,
  IdempotencyKeyMismatchError,
  IdempotencyKeyMissingError,
  IdempotencyRequestInvalidError,
  IdempotencyResponseTooLargeError,
} from '../shapes/idempotency.errors.js';
import { encodeAnswer, type FieldError } from './field-answer.js';
import { type StoredResponse } from '../shapes/stored-response.js';

/**
 * The library's refusal or failure as a GraphQL error: its message is the problem's `detail`
 * in GraphQL's words (`fieldMessage`),
 * and its extensions carry the problem's `code`, the HTTP status the same answer has on a
 * route (`status`), and its `Retry-After` in seconds (`retryAfter`) when it has one. The HTTP
 * answer of the operation stays the driver's (200): the other fields of the operation may
 * have answered.
 *
 * @example { message: 'A request with this idempotency key is still being processed; retry later.',
 *   extensions: { code: 'key_in_progress', status: 409, retryAfter: 1 } }
 */
export function problemError(error: IdempotencyError): FieldError {
  const problem = toProblem(error);
  const extensions: Record<string, unknown> = { code: error.code, status: problem.status };
  const retryAfter = problem.headers['retry-after'];
  if (retryAfter !== undefined) extensions.retryAfter = Number(retryAfter);
  return { kind: 'graphql', message: fieldMessage(error), extensions };
}

/**
 * The error's message in GraphQL's words (a mutation, its field and arguments), where a
 * route's speaks of a method, a path, a body; the others say the same on both.
 */
export function fieldMessage(error: IdempotencyError): string {
  if (error instanceof IdempotencyKeyMismatchError) {
    return (
      'This idempotency key was already used with a different operation (another mutation ' +
      'field, or other arguments); use a new key for a new operation.'
    );
  }
  if (error instanceof IdempotencyKeyMissingError) {
    return error.message.replace(' on this route;', ' on this mutation;');
  }
  if (error instanceof IdempotencyRequestInvalidError) {
    return `The field's arguments cannot be fingerprinted: ${error.reason}.`;
  }
  if (error instanceof IdempotencyResponseTooLargeError) {
    return (
      `The field's answer is larger than this mutation's maxResponseBytes (${error.maxBytes} ` +
      'bytes): it cannot be stored for replays, so nothing of the mutation was committed.'
    );
  }
  return error.message;
}

/** The problem as a field's stored answer (a response too large to store is one). */
export function problemAnswer(error: IdempotencyError): StoredResponse {
  const answer = encodeAnswer({ kind: 'error', error: problemError(error) });
  // Stored with the problem's status, as on a route, for `storeIf` and the events.
  return { ...answer, status: toProblem(error).status };
}
