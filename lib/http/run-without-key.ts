import { type CallHandler } from '@nestjs/common';
import { type ServerResponse } from 'node:http';
import { type Observable } from 'rxjs';
import { IdempotencyContext } from '../transaction/idempotency-context.js';
import { runInContext } from '../transaction/run-in-context.js';
import { holdResponse } from './response-hold.js';

/**
 * A request without a key on a route whose key is optional: nothing is claimed or stored,
 * but its phases run (as plain transactions) and a `respond()` status still goes out.
 */
export function runWithoutKey(
  defaultStatus: number,
  raw: ServerResponse,
  next: CallHandler,
): Observable<unknown> {
  const context = new IdempotencyContext(undefined, defaultStatus);
  holdResponse(
    raw,
    async () => context.finished,
    () => undefined,
  );
  return runInContext(context, next);
}
