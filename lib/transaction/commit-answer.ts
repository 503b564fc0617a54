import { publish } from '../events/idempotency-events.js';
import { classifyCommitError, refusalAnswer } from './failure.js';
import {
  IdempotencyLeaseLostError,
  IdempotencyResponseTooLargeError,
  PermanentDatabaseError,
  RetryLaterError,
} from '../shapes/idempotency.errors.js';
import { type IdempotencyContext } from './idempotency-context.js';
import { type ResolvedRouteOptions } from '../shapes/idempotency-options.interface.js';
import { isTransactional } from '../shapes/claim-store.interface.js';
import { type StoredResponse } from '../shapes/stored-response.js';
import { type RequestTransaction } from './request-transaction.js';
import { TransactionAbortedError } from './seam-errors.js';
import { eventOf, type OwnerTools, releaseQuietly } from './owner-tools.js';
import { storePlan } from './store-plan.js';

/**
 * Commits the request's transaction with `answer` as the stored response; returns what goes
 * out: `answer`, or the problem that replaces it when it could not be stored. A handler that
 * threw has its effects rolled back and its error answer stored on its own. `keepsKey`: a
 * refused commit leaves the key held (its lease running), for the caller to store another
 * answer on it (a tick's failure), rather than give it back. `recordsFailure`: `answer` is a
 * failure's record that no client retries after a fix (a tick's), kept without effects even
 * where the seam refused the transaction with a refusal never stored as a handler's answer
 * (see `withoutEffects`; adversary 102: given back, every replica ran the slot again).
 */
export async function commitAnswer(
  tools: OwnerTools,
  context: IdempotencyContext,
  fingerprint: Buffer,
  answer: StoredResponse,
  handlerFailed: boolean,
  keepsKey = false,
  recordsFailure = false,
): Promise<StoredResponse> {
  const claim = context.claim!;
  const transaction = context.transaction!;
  const plan = storePlan(answer.status, handlerFailed, tools.options.storeIf);
  if (plan === 'not-stored') {
    // Not to be stored (storeIf): nothing of the request stays either; a retry runs it.
    await transaction.rollback();
    await releaseQuietly(tools, context, false);
    publish('released', () => ({ ...eventOf(context), reason: 'store_if' }));
    return answer;
  }
  const began = performance.now();
  try {
    const into = plan === 'alone' ? await withoutEffects(transaction, recordsFailure) : transaction;
    // Its claim went with a transaction PostgreSQL rolled back (a oneCommit claim handed to a
    // first phase whose COMMIT a deferred constraint refused): nothing holds the key, and
    // nothing can store the answer; it goes out as it is, and a retry runs afresh.
    if (transaction.claimErased) {
      publish('released', () => ({ ...eventOf(context), reason: 'claim_rolled_back' }));
      return answer;
    }
    const stored = await finish(context, answer, into);
    if (!stored) {
      publish('leaseLost', () => eventOf(context));
      return tools.problem(new IdempotencyLeaseLostError());
    }
    tools.remember(claim, fingerprint, answer, context.claimStore!, 0);
    publish('stored', () => ({
      ...eventOf(context),
      status: answer.status,
      durationMs: performance.now() - began,
    }));
    if (answer.status >= 500)
      publish('storedError', () => ({ ...eventOf(context), status: answer.status }));
    return answer;
  } catch (error) {
    // Nothing was stored, and nothing of the handler's committed (or, if the commit's answer
    // was lost, all of it did, and a retry replays it): the key is given back to the retry.
    await transaction.rollback();
    if (!keepsKey) await releaseQuietly(tools, context, false);
    // A lasting refusal says what to change (its answer does not: it goes to the client).
    const why = error instanceof PermanentDatabaseError ? error.explanation : String(error);
    tools.logger.warn(`the response of key ${claim.key} was not stored: ${why}`);
    const problem = classifyCommitError(error);
    if (!keepsKey) publish('released', () => ({ ...eventOf(context), reason: problem.code }));
    return tools.problem(problem);
  }
}

/**
 * Undoes the handler's effects, for an answer stored without them: back to the claim when the
 * transaction holds it (`oneCommit`; the answer then commits with the claim, in it), else all
 * rolled back. The transaction the answer is to be stored in, if any. A transaction the seam
 * refused with a refusal that is never stored (`refusalAnswer`) stores no answer at all,
 * whatever the handler made of the refusal (caught, then its own 409 or `Error`, or a body too
 * large): it throws that refusal, as its commit would, for the caller to answer it, roll back
 * and give the key back (adversary 98). Unless the answer is a failure's record
 * (`recordsFailure`, a tick's): that is kept, without effects, whatever the refusal.
 */
export async function withoutEffects(
  transaction: RequestTransaction,
  recordsFailure = false,
): Promise<RequestTransaction | undefined> {
  const refusal = transaction.refusal;
  if (!recordsFailure && refusalAnswer(refusal)) throw new TransactionAbortedError(refusal);
  if (await transaction.undoEffects()) return transaction;
  await transaction.rollback();
  return undefined;
}

/**
 * Undoes the handler's effects now, for an answer that may come later (a slow exception
 * filter) and is stored without them: rolled back, or, when the transaction holds the claim,
 * undone to it and the claim committed alone, so that neither the handler's locks nor a
 * connection are held meanwhile; the key stays held by its lease. Never throws.
 */
export async function undoEffectsNow(transaction: RequestTransaction): Promise<void> {
  try {
    if (await transaction.undoEffects()) await transaction.commitUndoneClaim();
    else await transaction.rollback();
  } catch {
    await transaction.rollback();
  }
}

/**
 * Stores the answer: in the request's transaction, with the handler's effects, when it is
 * given and the store is in the app's database; on its own otherwise. A store outside the
 * database serves only routes that are not atomic (the start-up check), whose transaction
 * holds nothing of the handler's.
 */
export async function finish(
  context: IdempotencyContext,
  answer: StoredResponse,
  transaction: RequestTransaction | undefined,
): Promise<boolean> {
  const store = context.claimStore!;
  const claim = context.claim!;
  if (transaction && isTransactional(store)) return store.finishIn(claim, answer, transaction);
  await transaction?.rollback();
  return store.finish(claim, answer);
}

/**
 * The stream the handler returned failed before it was complete: the handler's effects roll
 * back and the key is given back, so that a retry runs it again and, if its stream completes
 * then, gets the whole body. Nothing has left the process (the hold kept it), so the client
 * gets a clean 503 in place of the broken answer.
 */
export async function giveBackBrokenStream(
  tools: OwnerTools,
  context: IdempotencyContext,
  error: unknown,
): Promise<StoredResponse> {
  const transaction = context.transaction!;
  // A statement its code had let fail (and went on) aborted the transaction already: that is
  // what the commit would have met, and every retry meets again, so it is the answer (500
  // transaction_aborted, as `commitAnswer` gives it), not "retry later".
  const aborted =
    transaction.lastError === undefined
      ? undefined
      : classifyCommitError(new TransactionAbortedError(transaction.lastError));
  await transaction.rollback();
  await releaseQuietly(tools, context, false);
  tools.logger.warn(
    `the response of key ${context.claim!.key} could not be sent whole: ${String(error)}`,
  );
  const problem = aborted ?? new RetryLaterError(STREAM_FAILED, 1);
  publish('released', () => ({ ...eventOf(context), reason: problem.code }));
  return tools.problem(problem);
}

/** The final answer of a response too large to store: a 500 that is itself stored. */
export function tooLarge(tools: OwnerTools, route: ResolvedRouteOptions): StoredResponse {
  return tools.problem(new IdempotencyResponseTooLargeError(route.maxResponseBytes));
}

const STREAM_FAILED =
  'The response stream failed before it was complete; nothing was stored. Retry with the same key.';
