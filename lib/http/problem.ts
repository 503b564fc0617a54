import { HttpStatus } from '@nestjs/common';
import { type IdempotencyError } from '../shapes/idempotency.errors.js';
import { type StoredResponse } from '../shapes/stored-response.js';
import { type Problem, type RenderedProblem, type ProblemRenderer } from '../shapes/problem.js';
export { type Problem, type RenderedProblem, type ProblemRenderer } from '../shapes/problem.js';

export const PROBLEM_CONTENT_TYPE = 'application/problem+json';

const STATUS_BY_CODE: Record<IdempotencyError['code'], [number, string]> = {
  key_missing: [HttpStatus.BAD_REQUEST, 'Idempotency key missing'],
  key_invalid: [HttpStatus.BAD_REQUEST, 'Idempotency key invalid'],
  tenant_invalid: [HttpStatus.BAD_REQUEST, 'Tenant invalid'],
  key_mismatch: [HttpStatus.UNPROCESSABLE_ENTITY, 'Idempotency key reused'],
  key_in_progress: [HttpStatus.CONFLICT, 'Request in progress'],
  lease_lost: [HttpStatus.CONFLICT, 'Idempotency lease lost'],
  store_unavailable: [HttpStatus.SERVICE_UNAVAILABLE, 'Idempotency store unavailable'],
  store_misconfigured: [HttpStatus.INTERNAL_SERVER_ERROR, 'Idempotency store misconfigured'],
  request_invalid: [HttpStatus.BAD_REQUEST, 'Request body invalid'],
  database_transient: [HttpStatus.SERVICE_UNAVAILABLE, 'Transient database error'],
  database_permanent: [HttpStatus.INTERNAL_SERVER_ERROR, 'Permanent database error'],
  retry_later: [HttpStatus.SERVICE_UNAVAILABLE, 'Retry later'],
  transaction_aborted: [HttpStatus.INTERNAL_SERVER_ERROR, 'Transaction aborted'],
  cursor_open: [HttpStatus.INTERNAL_SERVER_ERROR, 'Statement behind an open cursor'],
  subscriber_transaction_open: [
    HttpStatus.INTERNAL_SERVER_ERROR,
    'Transaction left open by a transaction subscriber',
  ],
  runner_connected_outside_request: [
    HttpStatus.INTERNAL_SERVER_ERROR,
    'Query runner connected outside the request',
  ],
  statement_beside_phase: [HttpStatus.INTERNAL_SERVER_ERROR, 'Statement beside a running phase'],
  phase_name_invalid: [HttpStatus.INTERNAL_SERVER_ERROR, 'Phase name PostgreSQL cannot record'],
  handler_retried_inside: [
    HttpStatus.INTERNAL_SERVER_ERROR,
    'Handler called again inside @Idempotent()',
  ],
  response_too_large: [HttpStatus.INTERNAL_SERVER_ERROR, 'Response too large to store'],
  stored_response_unreadable: [HttpStatus.INTERNAL_SERVER_ERROR, 'Stored response unreadable'],
};

/** The library's error codes answered with `status`, in the table's order (for OpenAPI). */
export function codesWithStatus(status: number): IdempotencyError['code'][] {
  return (Object.keys(STATUS_BY_CODE) as IdempotencyError['code'][]).filter(
    (code) => STATUS_BY_CODE[code][0] === status,
  );
}

/** The one place that maps the library's errors to HTTP. */
export function toProblem(error: IdempotencyError): Problem {
  const [status, title] = STATUS_BY_CODE[error.code];
  const headers: Record<string, string> = { 'content-type': PROBLEM_CONTENT_TYPE };
  if ('retryAfterSeconds' in error && typeof error.retryAfterSeconds === 'number') {
    headers['retry-after'] = String(error.retryAfterSeconds);
  }
  const extra = 'body' in error && error.body && typeof error.body === 'object' ? error.body : {};
  return {
    status,
    headers,
    body: {
      type: `urn:idempotency:${error.code}`,
      title,
      status,
      detail: error.message,
      code: error.code,
      ...extra,
    },
  };
}

/** An answer of the library's, ready to be written: the problem, or the app's shape of it. */
export interface ProblemAnswer {
  status: number;
  /** Lower-case names. */
  headers: Record<string, string>;
  body: object;
}

const RENDERED_CONTENT_TYPE = 'application/json; charset=utf-8';

/**
 * The one place every answer of the library's is made: the problem, shaped by the app's
 * `renderProblem` when it gave one. A renderer that throws, or returns no body, a body that
 * `JSON.stringify` cannot write (a BigInt, a cycle) or a status that is not one, must not leave
 * a client without an answer (nor store a broken one, nor a transaction open): the problem goes
 * out as it is, and `onRenderError` hears why.
 */
export function answerProblem(
  error: IdempotencyError,
  render?: ProblemRenderer,
  onRenderError?: (reason: unknown) => void,
): ProblemAnswer {
  const problem = toProblem(error);
  if (!render) return problem;
  try {
    const rendered = render(problem) as RenderedProblem | undefined;
    if (typeof rendered?.body !== 'object' || rendered.body === null) {
      throw new TypeError('renderProblem returned no body object');
    }
    const status = rendered.status ?? problem.status;
    if (!Number.isInteger(status) || status < 200 || status > 599) {
      throw new TypeError(`renderProblem returned status ${String(status)}, not 200 to 599`);
    }
    const headers: Record<string, string> = { 'content-type': RENDERED_CONTENT_TYPE };
    if (problem.headers['retry-after']) headers['retry-after'] = problem.headers['retry-after'];
    for (const [name, value] of Object.entries(rendered.headers ?? {})) {
      headers[name.toLowerCase()] = String(value);
    }
    // Every path writes the body as JSON.stringify does (a BigInt or a cycle throws there):
    // found here, where the problem can still go out, not after the claim's answer was built.
    if (JSON.stringify(rendered.body) === undefined) {
      throw new TypeError('renderProblem returned a body that JSON.stringify writes as nothing');
    }
    return { status, headers, body: rendered.body };
  } catch (reason) {
    onRenderError?.(reason);
    return problem;
  }
}

/** The answer as bytes, for the paths that write to the response themselves (and store it). */
export function problemResponse(
  error: IdempotencyError,
  render?: ProblemRenderer,
  onRenderError?: (reason: unknown) => void,
): StoredResponse {
  const answer = answerProblem(error, render, onRenderError);
  try {
    const body = Buffer.from(JSON.stringify(answer.body));
    return { status: answer.status, headers: answer.headers, body };
  } catch (reason) {
    // A body that wrote once and not twice (a toJSON with a state): the problem as it is.
    onRenderError?.(reason);
    const problem = toProblem(error);
    const body = Buffer.from(JSON.stringify(problem.body));
    return { status: problem.status, headers: problem.headers, body };
  }
}
