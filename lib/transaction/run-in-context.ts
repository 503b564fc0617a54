import { type CallHandler } from '@nestjs/common';
import { Observable } from 'rxjs';
import { type IdempotencyContext, idempotencyStorage } from './idempotency-context.js';
import { handleInTransaction } from './handle-in-transaction.js';

/**
 * Runs the handler inside the request's async context: Nest calls the handler when the
 * observable is subscribed to, so the subscription is what runs inside the context.
 */
export function runInContext(context: IdempotencyContext, next: CallHandler): Observable<unknown> {
  return new Observable<unknown>((subscriber) =>
    idempotencyStorage.run(context, () =>
      handleInTransaction(context.transaction, next, subscriber),
    ),
  );
}
