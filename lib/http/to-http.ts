import { type ServerResponse } from 'node:http';
import { HttpException } from '@nestjs/common';
import { type AbstractHttpAdapter } from '@nestjs/core';
import { type IdempotencyError } from '../shapes/idempotency.errors.js';
import { pinContentType } from './pin-content-type.js';
import { PROBLEM_CONTENT_TYPE, type ProblemAnswer } from './problem.js';
import { rawResponse } from './raw-response.js';
import { forgetWrittenLibraryError, noteWrittenLibraryError } from './written-library-error.js';

/**
 * The library's answer as the HttpException the filters render: its headers are set on the
 * response through the adapter, and its type pinned so that the filter's JSON does not reset it.
 */
export function toHttpException(
  adapter: AbstractHttpAdapter,
  response: object,
  answer: ProblemAnswer,
  cause: IdempotencyError,
): HttpException {
  const target = response as HeaderTarget;
  const before = Object.keys(answer.headers).map((name) => [name, target.getHeader?.(name)]);
  for (const [name, value] of Object.entries(answer.headers)) {
    adapter.setHeader(response, name, value);
  }
  const raw = rawResponse(response);
  const unpin = pinContentType(raw, answer.headers['content-type'] ?? PROBLEM_CONTENT_TYPE);
  const earlier = undoing.get(raw);
  undoing.set(raw, () => {
    unpin();
    for (const [name, value] of before as [string, unknown][]) {
      if (value === undefined) target.removeHeader?.(name);
      else adapter.setHeader(response, name, value as string);
    }
    earlier?.();
  });
  // Read by the request's owner, if another run of the request answers with it (see run-owned).
  noteWrittenLibraryError(raw, cause);
  return new HttpException(answer.body, answer.status, { cause });
}

/** What the adapters' responses (Express' and Fastify's reply) offer to read and drop headers. */
interface HeaderTarget {
  getHeader?: (name: string) => unknown;
  removeHeader?: (name: string) => void;
}

/** How to undo the headers the library's answers set on a response, newest first. */
const undoing = new WeakMap<ServerResponse, () => void>();

/**
 * Forgets the library's answers made on `response` so far, unwritten: an app's retry of the
 * request (rxjs `retry()` around a run the library answered 503 or 409) answers in their
 * place, and their `Retry-After` and problem type must not go out with that answer, nor be
 * stored with it. Their headers are put back as they were; a response whose headers went out
 * already is left alone.
 */
export function forgetLibraryAnswers(response: object): void {
  const raw = rawResponse(response);
  forgetWrittenLibraryError(raw);
  const undo = undoing.get(raw);
  undoing.delete(raw);
  if (undo && !raw.headersSent) undo();
}
