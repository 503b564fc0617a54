import { asError, isSubmittable } from './request-transaction.js';

/**
 * A statement refused before it was sent, answered in the form it was sent in: a submittable
 * (a cursor, a stream) hears it through its own `handleError`, a callback gets it as its
 * first argument, and a promise rejects, each a tick later, as node-postgres answers.
 */
export function refusedStatement(args: readonly unknown[], error: unknown): unknown {
  if (isSubmittable(args[0])) {
    const submittable = args[0] as { handleError?: (error: unknown) => void };
    queueMicrotask(() => submittable.handleError?.(error));
    return submittable;
  }
  const last = args[args.length - 1];
  if (typeof last === 'function') {
    queueMicrotask(() => (last as (error: unknown) => void)(error));
    return undefined;
  }
  return Promise.reject(asError(error));
}
