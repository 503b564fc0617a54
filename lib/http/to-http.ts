import { HttpException } from '@nestjs/common';
import { type AbstractHttpAdapter } from '@nestjs/core';
import { type IdempotencyError } from '../shapes/idempotency.errors.js';
import { pinContentType } from './pin-content-type.js';
import { PROBLEM_CONTENT_TYPE, type ProblemAnswer } from './problem.js';
import { rawResponse } from './raw-response.js';
import { noteWrittenLibraryError } from './written-library-error.js';

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
  for (const [name, value] of Object.entries(answer.headers)) {
    adapter.setHeader(response, name, value);
  }
  const raw = rawResponse(response);
  pinContentType(raw, answer.headers['content-type'] ?? PROBLEM_CONTENT_TYPE);
  // Read by the request's owner, if another run of the request answers with it (see run-owned).
  noteWrittenLibraryError(raw, cause);
  return new HttpException(answer.body, answer.status, { cause });
}
