import { HttpStatus } from '@nestjs/common';
import { type IdempotencyError } from '../idempotency.errors.js';
import { type StoredResponse } from '../stored-response.js';

/** An RFC 9457 problem, as the IETF idempotency draft suggests for its error answers. */
export interface Problem {
  status: number;
  headers: Record<string, string>;
  body: {
    type: string;
    title: string;
    status: number;
    detail: string;
    code: string;
  } & Record<string, unknown>;
}

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
  retry_later: [HttpStatus.SERVICE_UNAVAILABLE, 'Retry later'],
  transaction_aborted: [HttpStatus.INTERNAL_SERVER_ERROR, 'Transaction aborted'],
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

/** The problem as bytes, for the paths that write to the response themselves. */
export function problemResponse(error: IdempotencyError): StoredResponse {
  const problem = toProblem(error);
  return {
    status: problem.status,
    headers: problem.headers,
    body: Buffer.from(JSON.stringify(problem.body)),
  };
}
