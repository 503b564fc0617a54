import { publish } from '../events/idempotency-events.js';
import { type IdempotencyContext } from '../transaction/idempotency-context.js';
import { finish, withoutEffects, tooLarge } from '../transaction/commit-answer.js';
import { eventOf, type OwnerTools, rollBackAndRelease } from '../transaction/owner-tools.js';
import { lateAnswerStorable, storePlan } from '../transaction/store-plan.js';
import { classifyCommitError } from '../transaction/failure.js';
import { renderResult, resultStream } from './handler-result.js';
import { isPlainData } from './plain-data.js';
import { type RouteSettings } from './route-settings.js';

/**
 * The handler settled after an outer interceptor had answered for it: its own answer is
 * committed with its effects now, for the retries to replay. One that failed is rolled back
 * and its key given back, so that a retry runs it again and gets its real answer. Whether its
 * effects committed, with its answer.
 */
export async function settleDetached(
  tools: OwnerTools,
  context: IdempotencyContext,
  fingerprint: Buffer,
  settings: RouteSettings,
  outcome: { value: unknown } | { error: unknown },
): Promise<boolean> {
  const claim = context.claim!;
  const transaction = context.transaction!;
  try {
    // A stream (a file) is sent by the adapter, which no longer will: what it would have
    // carried is not known here, so it is no answer to store, and the retry runs again.
    const stream = 'value' in outcome ? resultStream(outcome.value) : undefined;
    stream?.destroy();
    const storable = lateAnswerStorable({
      failed: 'error' in outcome,
      takesResponse: settings.takesResponse,
      stream: stream !== undefined,
    });
    // A value that is not plain data, or one the route's `@SerializeOptions()` reshapes, would
    // be rendered past the app's own serializing (see `isPlainData`, `serialized`): given back,
    // the retry runs it again and gets the app's real answer.
    const renderable =
      'value' in outcome &&
      (context.finished || (!settings.serialized && isPlainData(outcome.value)));
    if (!storable || !renderable) {
      await rollBackAndRelease(tools, context, 'timeout');
      return false;
    }
    const rendered =
      context.finished ??
      renderResult(outcome.value, context.defaultStatus, settings.headers, tools.adapterType());
    const overflow = rendered.body.length > settings.route.maxResponseBytes;
    const answer = overflow ? tooLarge(tools, settings.route) : rendered;
    const plan = storePlan(answer.status, overflow, tools.options.storeIf);
    if (plan === 'not-stored') {
      await rollBackAndRelease(tools, context, 'store_if');
      return false;
    }
    const began = performance.now();
    const storeIn = plan === 'alone' ? await withoutEffects(transaction) : transaction;
    if (await finish(context, answer, storeIn)) {
      tools.remember(claim, fingerprint, answer, context.claimStore!, 0);
      // The events of an answer stored in time (`commitAnswer`): a 5xx stored is alerted on.
      publish('stored', () => ({
        ...eventOf(context),
        status: answer.status,
        durationMs: performance.now() - began,
      }));
      if (answer.status >= 500) {
        publish('storedError', () => ({ ...eventOf(context), status: answer.status }));
      }
      return true;
    }
    tools.logger.warn(`key ${claim.key}: lease lost before the late answer was stored`);
    publish('leaseLost', () => eventOf(context));
    return false;
  } catch (error) {
    tools.logger.warn(`the late answer of key ${claim.key} was not stored: ${String(error)}`);
    await rollBackAndRelease(tools, context, classifyCommitError(error).code);
    return false;
  }
}

/**
 * What a subscriber still listening to a detached run (an app that answered at once and runs
 * the handler in the background) is told when the handler's value could not be stored with
 * its work (a stream, a value that is not plain data, `storeIf`, the lease lost): the work was
 * rolled back and the key given back, so the app's retry, or the client's, runs it again.
 */
export class DetachedWorkRolledBackError extends Error {
  constructor() {
    super(
      "the handler's work, run after its request was answered, was rolled back: its value " +
        'could not be stored as the key’s answer with it (a stream, a value that is not plain ' +
        'data, storeIf, or the lease lost); the key is free and a retry runs it again',
    );
    this.name = 'DetachedWorkRolledBackError';
  }
}
