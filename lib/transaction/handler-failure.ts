import { publish } from '../events/idempotency-events.js';
import { type Failure, classifyHandlerError, isTimeoutError, refusalAnswer } from './failure.js';
import { IdempotencyError } from '../shapes/idempotency.errors.js';
import { type IdempotencyContext } from './idempotency-context.js';
import { eventOf, type OwnerTools, releaseQuietly, rollBackAndRelease } from './owner-tools.js';

/**
 * What a failure of the request means (see `classifyHandlerError`); returns the error that
 * goes on to Nest's exception filters.
 */
export async function onHandlerError(
  tools: OwnerTools,
  context: IdempotencyContext,
  response: object,
  letThrough: () => void,
  error: unknown,
): Promise<unknown> {
  const transaction = context.transaction!;
  if (!context.handlerStarted) {
    // Failed in a guard, pipe or interceptor: nothing ran, so the key is given back.
    letThrough();
    await rollBackAndRelease(tools, context, 'before_handler', true);
    return error instanceof IdempotencyError ? tools.toHttp(response, error) : error;
  }
  if (isTimeoutError(error)) {
    // Not done in time (see `isTimeoutError`): not stored, the key given back at once.
    letThrough();
    await rollBackAndRelease(tools, context, 'timeout');
    return error;
  }
  // A handler that caught a deadlock and went on fails next with "transaction aborted":
  // what the request met is the deadlock.
  const cause = transaction.causeOf(error);
  const failure = answerOfRefused(transaction.refusal) ?? classifyHandlerError(cause);
  if (failure.kind === 'final') return error;
  letThrough();
  await transaction.rollback();
  // Nothing final happened: the work resumes when the client retries with the same key.
  if (failure.kind === 'retry') {
    await releaseQuietly(tools, context, false);
    publish('released', () => ({ ...eventOf(context), reason: failure.error.code }));
  } else {
    publish('leaseLost', () => eventOf(context));
  }
  return tools.toHttp(response, failure.error);
}

/**
 * A transaction the seam refused (a runner connected outside the request, a statement beside
 * a phase, an open cursor, a subscriber's transaction) answers its refusal whatever its handler
 * threw after catching it (its own 409, a plain `Error`): rolled back, nothing stored, the key
 * given back (adversary 98). Undefined when the refusal is none of those, or there is none.
 */
function answerOfRefused(refusal: unknown): Failure | undefined {
  const error = refusalAnswer(refusal);
  return error ? { kind: 'retry', error } : undefined;
}
