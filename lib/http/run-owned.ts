import { type ServerResponse } from 'node:http';
import { type CallHandler } from '@nestjs/common';
import { Observable } from 'rxjs';
import { classifyCommitError, classifyHandlerError } from '../transaction/failure.js';
import { IdempotencyContext, type ActiveClaim } from '../transaction/idempotency-context.js';
import { isTransactional } from '../shapes/claim-store.interface.js';
import { type IdempotencyDatabase } from '../data-layers/idempotency-database.js';
import {
  commitAnswer,
  giveBackBrokenStream,
  tooLarge,
  undoEffectsNow,
} from '../transaction/commit-answer.js';
import { onHandlerError } from '../transaction/handler-failure.js';
import { type OwnerTools, rollBackAndRelease } from '../transaction/owner-tools.js';
import { type RequestTransaction } from '../transaction/request-transaction.js';
import { runInContext } from '../transaction/run-in-context.js';
import {
  outcomeStillToCome,
  isOuterTimeout,
  isUnwrittenValue,
  onStreamError,
  resultStream,
  serializationFailed,
  watchJsonWrite,
} from './handler-result.js';
import { rawResponse } from './raw-response.js';
import { type RequestRun, type RunOutcome } from './earlier-run.js';
import { holdResponse } from './response-hold.js';
import { type RouteSettings } from './route-settings.js';
import { DetachedWorkRolledBackError, settleDetached } from './settle-detached.js';
import { writtenLibraryError } from './written-library-error.js';
import { forgetLibraryAnswers } from './to-http.js';
import { IdempotencyKeyInProgressError } from '../shapes/idempotency.errors.js';

const CLIENT_GONE = new Error('the client closed its connection before the response ended');

/**
 * Runs the handler as the key's owner, in the request's transaction (opened by its first
 * write). The response the adapter writes is held until the transaction commits it with the
 * handler's effects (fenced by the claim), so a client never receives an answer that a retry
 * could not replay, and a retry after any failure finds either nothing done or all of it.
 */
export function runOwned(
  tools: OwnerTools,
  database: IdempotencyDatabase,
  claim: ActiveClaim,
  fingerprint: Buffer,
  settings: RouteSettings,
  defaultStatus: number,
  response: object,
  next: CallHandler,
  /** The request's transaction when it holds the claim already (`oneCommit`). */
  claimedIn?: RequestTransaction,
  /** This run of the request, for a later run of it to find (see earlier-run.ts). */
  run?: RequestRun,
): Observable<unknown> {
  const { route } = settings;
  const raw = rawResponse(response);
  // What an earlier run of this request wrote is not this run's to read (see below), nor are
  // the headers of the library's answer it made, not written (the app retried it).
  forgetLibraryAnswers(response);
  const transaction = claimedIn ?? database.transaction(false);
  transaction.isolationLevel = route.isolationLevel;
  const context = new IdempotencyContext(
    claim,
    defaultStatus,
    transaction,
    route.atomic,
    settings.store,
  );
  context.route = settings.name;
  /** The handler's own error: the filters write its answer, stored without its effects. */
  let handlerError = false;
  /** Set when the request is torn down before its handler started: the key is given back. */
  let givingBack: Promise<void> | undefined;
  /**
   * Set when the stream the handler returned failed midway: the adapter then ends the
   * response with the chunks it had plus an error of its own, which is no answer to store.
   */
  let streamFailure: { error: unknown } | undefined;
  /** Whether the handler settled (completed or failed), and what it emitted. */
  let settled = false;
  /** The raw response's status when the handler returned a value (one it set itself). */
  let statusWhenReturned: number | undefined;
  /** Whether writing the value it returned threw (see `watchJsonWrite`). */
  let writeThrew = false;
  // Not only its own value: an interceptor outside the library's may have mapped it.
  watchJsonWrite(response, () => {
    if (result !== undefined) writeThrew = true;
  });
  /** Answered from outside while the handler goes on: it commits its own answer later. */
  let detached = false;
  /** Whether the adapter began writing the answer (held until the commit stores it). */
  let answerWriting = false;
  let result: unknown;
  /** Whether the handler emitted its value (`result` may be undefined). */
  let emitted = false;
  /** Every value it emitted, in order: a run that joins this one answers all of them. */
  const values: unknown[] = [];
  /** Whether the handler (or a layer inside `@Idempotent()`) failed: only then may it be retried. */
  let failed = false;
  /** Whether that value is a stream, whose bytes the adapter sends as they come. */
  let streamed = false;
  /** The client closed its connection before the answer was all written. */
  let clientGone = false;
  /** An `@Res()` handler had begun to send its answer before that (see below). */
  let sentBeforeGone = false;
  /** Given back as an answer that will not come (see `leftMidStream`). */
  let gaveBack = false;
  /** What the handler came to, for a run of the request beside this one (see `run.outcome`). */
  let shared: { promise: Promise<RunOutcome>; resolve: (outcome: RunOutcome) => void } | undefined;
  /**
   * Once a detached handler settled: its value, stored with its effects as the key's answer;
   * or, rolled back, the key to claim again.
   */
  let detachedSettled: Promise<RunOutcome> | undefined;
  /** The timeout that detached it (inside `@Idempotent()`): this request's answer meanwhile. */
  let timedOut: { error: unknown } | undefined;
  /**
   * The value an interceptor inside `@Idempotent()` gave in the handler's place while the
   * handler's Promise went on (`timeout({ with: () => of(…) })`): this request's answer
   * meanwhile, passed on as it comes, never stored.
   */
  let substitute: { value: unknown; values: unknown[] } | undefined;
  /** The error the handler's failure was handed on as, once the app's filters may get it. */
  let failedWith: RunOutcome | undefined;
  const sharedOutcome = (): Promise<RunOutcome> => {
    if (!shared) {
      let resolve!: (outcome: RunOutcome) => void;
      const promise = new Promise<RunOutcome>((settle) => (resolve = settle));
      shared = { promise, resolve };
    }
    return shared.promise;
  };
  const failure = (): Promise<RunOutcome> =>
    failedWith ? Promise.resolve(failedWith) : sharedOutcome();
  /** Detached: a run beside this one claims again once the handler's work is settled. */
  const settleDetachedWith = (outcome: { value: unknown } | { error: unknown }) => {
    const stored = settleDetached(tools, context, fingerprint, settings, outcome);
    detachedSettled = stored.then((committed) => {
      // Its value committed as the key's answer: a run beside this one (a background retry
      // after a timeout of its own) answers it, as a replay would. Else it claims again.
      // Only where the request was answered from outside already (202 at once), so that the
      // value reaches a background subscriber and never the client; and only a value stored
      // as the adapter writes it (`respond()` carries a status of its own). Elsewhere the run
      // claims again and replays the stored answer, as every retry of the key gets it (an
      // envelope interceptor outside would wrap a shared value, not the replay).
      if (committed && 'value' in outcome && !context.finished && raw.writableEnded) {
        return { value: outcome.value, values };
      }
      return { claimAgain: true } as const;
    });
    void detachedSettled.then((came) => shared?.resolve(came));
    return stored;
  };
  /**
   * What is done when the answer comes from outside the handler before it settled (see the
   * teardown below); set once it is subscribed to.
   */
  let answeredOutside: ((written: boolean) => void) | undefined;
  const letThrough = holdResponse(
    raw,
    async (written) => {
      if (!settled && result === undefined && !settings.responseHandled && answeredOutside) {
        // Written while the handler still runs and has emitted nothing: a layer outside it
        // answered (an outer timeout whose 408 came through an interceptor that did not pass
        // the unsubscription on, as nestjs-cls's does). Not the handler's answer: not stored.
        answeredOutside(true);
      }
      if (givingBack) {
        // Not the handler's answer: not stored, and sent once the key is free again.
        await givingBack;
        return undefined;
      }
      if (detached || gaveBack) return undefined;
      answerWriting = true;
      // Settled with a value an app interceptor worked on until now: its lease is no longer
      // needed past the commit below (a @Res handler that wrote first stops at its settle).
      // Renewed while statements its handler left running finish (the commit waits for them:
      // see `heartbeatStop`).
      if (settled) stopHeartbeat?.();
      const outerTimeout = isOuterTimeout({
        status: written.status,
        returned: emitted,
        httpCode: settings.httpCode,
        statusWhenReturned,
      });
      if (!handlerError && outerTimeout) {
        // An outer timeout fired after the handler's value, while an interceptor of the app's
        // still worked on it (an audit call before its envelope, after `firstValueFrom` or in
        // a `mergeMap`): none of its answer was written. As for an outer timeout while the
        // handler runs: the timeout's answer goes out, not stored, and the handler's effects
        // commit with its own answer (rendered as the adapter would), which retries replay.
        detached = true;
        settleDetachedWith({ value: result });
        return undefined;
      }
      if (streamFailure) return giveBackBrokenStream(tools, context, streamFailure.error);
      // The library's own passing error, thrown by an app interceptor after the handler's value
      // (a `RetryLaterError` from its audit step) and answered by `IdempotencyErrorFilter`:
      // "nothing stored, retry with the same key", as from the handler itself. Not stored.
      // So is the library's 409 `key_in_progress` answered by another run of this request on
      // the response they share (two runs told to claim again together): never an answer.
      const thrownAfter = handlerError ? undefined : writtenLibraryError(raw);
      if (
        thrownAfter &&
        (classifyHandlerError(thrownAfter).kind === 'retry' ||
          thrownAfter instanceof IdempotencyKeyInProgressError)
      ) {
        await rollBackAndRelease(tools, context, thrownAfter.code);
        return undefined;
      }
      // The client left mid-stream and the adapter answered its own failure to send (Fastify's
      // 500 after a premature close): no answer of the handler's, nothing to store.
      if (clientGone && written.status >= 500 && (streamed || sentBeforeGone)) {
        return giveBackBrokenStream(tools, context, CLIENT_GONE);
      }
      const unwritten =
        !handlerError &&
        !context.finished &&
        isUnwrittenValue({
          status: written.status,
          returned: result !== undefined,
          httpCode: settings.httpCode,
          statusWhenReturned,
          writeThrew: writeThrew || serializationFailed(raw),
        });
      if (unwritten) {
        tools.logger.error(
          `the value ${settings.name} returned for key ${claim.key} could not be written ` +
            `(answered ${written.status}): its effects are rolled back, the answer stored`,
        );
      }
      const failed = handlerError || unwritten;
      const answer = failed ? written : (context.finished ?? written);
      // finish()'s own answer is measured too: it is what would be stored.
      if (answer.body.length > route.maxResponseBytes) {
        return commitAnswer(tools, context, fingerprint, tooLarge(tools, route), true);
      }
      const stored = await commitAnswer(tools, context, fingerprint, answer, failed);
      return stored === written ? undefined : stored;
    },
    // Only a bug in the commit path gets here: nothing is stored, the lease runs out. The
    // transaction is ended all the same, or its session stays idle in transaction holding
    // whatever the handler locked, and the retry waits on it.
    async (error) => {
      tools.logger.error(`the answer of key ${claim.key} failed: ${String(error)}`);
      await transaction.rollback().catch(() => undefined);
      return tools.problem(classifyCommitError(error));
    },
    {
      maxBytes: route.maxResponseBytes,
      // Too large to store: the handler's effects roll back, and the 500 is its final
      // answer (a retry would only grow the same response again, and on a route that is not
      // atomic repeat its writes).
      // A stream that failed past the limit changes nothing: whole, it was too large too.
      onOverflow: () => commitAnswer(tools, context, fingerprint, tooLarge(tools, route), true),
    },
    route.storedHeaders,
  );
  if (transaction.holdsClaim) {
    // Committed alone (a phase), the claim's lease starts then, not when it was made.
    const { store } = settings;
    if (isTransactional(store) && store.holdLeaseText) {
      transaction.renewAtClaimCommit = (literal) => store.holdLeaseText!(claim, literal);
    }
  }
  // Uncommitted (`oneCommit`), the claim is renewed inside its transaction (`renewsInside`):
  // no one else sees it, but the renewals keep the session from the idle bound that frees it.
  const stopHeartbeat = route.heartbeat
    ? tools.renewals.heartbeat(settings.store, claim, transaction)
    : undefined;
  // A client that leaves mid-stream: the adapter destroys the stream (or `pipe()` unpipes) and
  // never ends the response, so the answer is never written. Once the handler settled with a
  // stream (or answered through `@Res()`), nothing more will come: as for a stream that fails
  // midway, its work is rolled back and its key given back, and the retry runs it again.
  // Otherwise (a handler still working) its answer is still stored when it comes.
  const leftMidStream = (graceOver = false) => {
    if (!clientGone || !settled || answerWriting || detached || givingBack || gaveBack) return;
    // An answer that will not come: a stream the adapter gave up, or an `@Res()` answer cut
    // midway. A handler's value still on its way through an app interceptor is still written,
    // and stored.
    if (!streamed && !sentBeforeGone && !handlerError) return;
    if (handlerError && !streamed && !sentBeforeGone && !graceOver) {
      // The handler's error, whose filter may be slow (an error tracker awaited) and still
      // write it, to be stored; or may write nothing to a client that is gone (the "499"
      // idiom). It is given its lease's length (the heartbeat renewing meanwhile): then, still
      // unwritten, given back. Its effects are undone now, as an error's answer is stored
      // without them anyway: the locks its handler took are not held, idle, for that time.
      void undoEffectsNow(transaction);
      setTimeout(() => leftMidStream(true), claim.leaseMs).unref();
      return;
    }
    answerWriting = true;
    gaveBack = true;
    stopHeartbeat?.();
    letThrough();
    void giveBackBrokenStream(tools, context, CLIENT_GONE).catch((error: unknown) =>
      tools.logger.error(`giving back key ${claim.key} failed: ${String(error)}`),
    );
  };
  const noteGone = () => {
    if (raw.writableFinished) return;
    clientGone = true;
    leftMidStream();
  };
  // Gone already (during a slow guard or pipe, before this run began): its 'close' is past.
  if (raw.closed) noteGone();
  else raw.once('close', noteGone);
  // The app's own retry outside `@Idempotent()` runs the request again: once the handler
  // settled, before its answer is on its way, this run steps aside for it (see earlier-run.ts).
  if (run) {
    run.stepAside = (retryOf) => {
      // Only a failed try is the app's to retry. A later run after a value still on its way
      // (a side subscription made late, `repeat()`, a retry after an app interceptor's error
      // after that value) answers with that value: the handler's work is done once. A later
      // run after the failure that its error did not set off (an audit that subscribes late,
      // while a slow filter writes the error) is told the error (`outcome`), never runs again.
      if (!settled || !failed || detached || answerWriting || givingBack || gaveBack) {
        return undefined;
      }
      if (retryOf !== run) return undefined;
      gaveBack = true;
      stopHeartbeat?.();
      letThrough();
      return rollBackAndRelease(tools, context, 'retried');
    };
    // A run beside this one while its handler works (a second subscription): it answers with
    // what this handler comes to, which its adapter writes and this run stores.
    run.outcome = (retryOf) => {
      // Failed: the app's retry of this try claims again (given back already: a passing
      // failure, or by `stepAside`); any other later run is told the same error.
      if (failed) return retryOf === run ? undefined : failure();
      if (gaveBack) return undefined;
      // Giving the key back (answered before the handler started), or detached (answered
      // from outside while it goes on): the other run claims again once that is done, and
      // then claims the key, or replays what the detached handler stored, never meets it.
      if (givingBack) return givingBack.then(() => ({ claimAgain: true }));
      if (detachedSettled) return detachedSettled;
      // Timed out while its handler goes on: an app's retry of the request times out too (it
      // would, running the handler again), rather than wait without a bound for that handler.
      if (timedOut) return Promise.resolve(timedOut);
      if (substitute) return Promise.resolve(substitute);
      if (settled && !detached) return Promise.resolve({ value: result, values });
      return sharedOutcome();
    };
  }
  // Whether an `@Res()` handler had begun sending its answer when its client left: then what
  // comes after (Fastify's 500 after a premature close) is the adapter's, not its own; a 5xx it
  // writes whole after its client left is its answer. (Put back with the held write.)
  if (settings.responseHandled) {
    const heldWrite = raw.write;
    raw.write = function noteSent(this: ServerResponse, ...args: unknown[]) {
      if (!clientGone) sentBeforeGone = true;
      return (heldWrite as (...a: unknown[]) => boolean).apply(this, args);
    } as ServerResponse['write'];
  }

  return new Observable<unknown>((subscriber) => {
    /**
     * `untilWritten`: it settled with an answer still on its way, through an app interceptor's
     * slow step (an audit call before its envelope, in a `mergeMap` or after `firstValueFrom`)
     * or an exception filter's: the request still holds its key and its open transaction, so
     * its lease is renewed until the adapter writes that answer. Otherwise (detached, the
     * answer written already) it stops now.
     */
    const settle = (untilWritten = false) => {
      settled = true;
      // Renewed while statements its handler left running finish (its answer waits for them:
      // see `heartbeatStop`).
      if (!untilWritten || detached || answerWriting) stopHeartbeat?.();
    };
    // Answered before this run began (an interceptor that answers at once, 202, and runs the
    // handler on the side, in the background): nothing will write the handler's answer, so it
    // goes on detached, as under an outer timeout, and commits with its own answer when it
    // settles; the retries replay that. (A later run of an answered request runs nothing:
    // `claimAfter`.)
    if (raw.writableEnded && !settings.responseHandled) {
      detached = true;
      letThrough();
    }
    /**
     * Detached, its subscriber told what the handler came to once that is settled, if it is
     * still listening: an app that answered at once (202) and runs the handler in the
     * background sends its webhook with the value of work committed, and its `retry()` gets
     * the error (the key given back: the retry claims anew). An outer timeout's subscriber
     * left: nothing to tell.
     */
    const tellDetached = (came: { values: unknown[] } | { error: unknown }) => {
      if (subscriber.closed) return;
      if ('error' in came) {
        if (run) run.handOn(subscriber, came.error);
        else subscriber.error(came.error);
        return;
      }
      for (const value of came.values) subscriber.next(value);
      subscriber.complete();
    };
    const inner = runInContext(context, next).subscribe({
      next: (value) => {
        if (substitute) {
          substitute.values.push(value);
          subscriber.next(value);
          return;
        }
        // A value while the handler's own Promise has not resolved is not its answer: an
        // interceptor inside `@Idempotent()` put it in its place (a `timeout()` with a
        // fallback, a `race()` with a cached value). As for a timeout there: it goes out,
        // unstored, and the handler goes on in its transaction and commits with its own answer
        // when it settles (its retries get 409 until then, then that answer).
        const goingOn = detached ? undefined : outcomeStillToCome(context, { value });
        if (goingOn) {
          detached = true;
          substitute = { value, values: [value] };
          letThrough();
          subscriber.next(value);
          void goingOn.then((outcome) => {
            settle();
            settleDetachedWith(outcome);
          });
          return;
        }
        result = value;
        emitted = true;
        values.push(value);
        statusWhenReturned = raw.statusCode;
        const stream = resultStream(value);
        streamed = stream !== undefined;
        // Watched before the adapter gets it, so the failure is known when it ends the reply.
        if (stream) onStreamError(stream, (error) => (streamFailure = { error }));
        if (!detached) subscriber.next(value);
      },
      error: (error: unknown) => {
        if (substitute) {
          subscriber.error(error);
          return;
        }
        if (detached) {
          settle();
          void settleDetachedWith({ error }).then(() => tellDetached({ error }));
          return;
        }
        // A timeout of an interceptor inside `@Idempotent()` (a `timeout()` written above it)
        // while the handler's Promise goes on: as under an outer timeout, the timeout's answer
        // goes out unstored, and the handler's effects commit with its own answer when it
        // settles (its retries get 409 until then, then that answer).
        const goingOn = outcomeStillToCome(context, { error });
        if (goingOn) {
          detached = true;
          timedOut = { error };
          letThrough();
          subscriber.error(error);
          shared?.resolve({ error });
          void goingOn.then((outcome) => {
            settle();
            settleDetachedWith(outcome);
          });
          return;
        }
        failed = true;
        // The handler's own error is its answer once the app's exception filters write it, and
        // a filter may be slow (an error tracker awaited): its lease is renewed until then, as
        // for a value. Any other (rolled back, the key given back) stops it now.
        settle(true);
        // Let through unstored (not its answer: rolled back, the key given back). Its
        // heartbeat covers the ROLLBACK, which waits behind a statement of its handler's still
        // running (`heartbeatStop`), and stops at the release at the latest (`release`), so
        // that no renewal follows it.
        const unstored = () => {
          // Given back already: an app's retry of the request claims anew (see `holdRun`).
          gaveBack = true;
          stopHeartbeat?.();
          letThrough();
        };
        onHandlerError(tools, context, response, unstored, error).then(
          (mapped) => {
            handlerError = mapped === error && context.handlerStarted;
            failedWith = { error: mapped };
            // Held by the app's chain (its retry), a later run is that retry (`errorHeld`).
            if (run) run.handOn(subscriber, mapped);
            else subscriber.error(mapped);
            shared?.resolve(failedWith);
            // Gone before its filters answered: they may write nothing. Checked once what they
            // wrote at once has reached the commit (its finalizer starts in a microtask).
            setImmediate(() => leftMidStream());
          },
          (unexpected: unknown) => {
            failedWith = { error: unexpected };
            if (run) run.handOn(subscriber, unexpected);
            else subscriber.error(unexpected);
            shared?.resolve(failedWith);
          },
        );
      },
      complete: () => {
        if (substitute) {
          subscriber.complete();
          return;
        }
        settle(emitted);
        if (detached) {
          void settleDetachedWith({ value: result }).then((stored) =>
            tellDetached(stored ? { values } : { error: new DetachedWorkRolledBackError() }),
          );
        } else {
          subscriber.complete();
          shared?.resolve({ value: result, values });
        }
        // Gone before its stream was handed over: the adapter may never end it either.
        // Checked once what it wrote at once has reached the commit, as above.
        setImmediate(() => leftMidStream());
      },
    });
    answeredOutside = (written) => {
      if (settled || detached || givingBack) return;
      // Unsubscribed with nothing written while a run of this request beside this one waits
      // for what the handler comes to (a side subscription that stopped watching, at its first
      // value with `take(1)` or before any, the returned one going on): the handler's answer
      // is still the request's, all of it, written through that run and stored here, as if
      // this one still watched. Cut, the client's run would get the first value alone;
      // detached, a late answer that cannot be stored (an entity, an error) would be rolled
      // back and the handler run a second time.
      if (!written && shared && context.handlerStarted) return;
      // Unsubscribed after its value (an interceptor's `firstValueFrom`, `take(1)`): that
      // value is its answer, on its way to the adapter through that interceptor, which may
      // map it (an envelope) or refuse it (a 500): what the adapter writes is stored.
      if (emitted) {
        settle(true);
        // Passed on, as without the library: an Observable handler's work after its first
        // value is cancelled (it would run after the answer, outside the transaction).
        inner.unsubscribe();
        shared?.resolve({ value: result, values });
        return;
      }
      // Answered before the handler's answer (an outer timeout interceptor, say): what goes
      // out now is not the handler's answer, so it is not stored.
      if (context.handlerStarted) {
        // The handler goes on, in its transaction; it commits with its own answer when it
        // settles, so that the retries replay that answer and the work is done once.
        detached = true;
        letThrough();
        return;
      }
      // Never started: the key is given back, and the handler must not start late.
      stopHeartbeat?.();
      context.abandoned = true;
      inner.unsubscribe();
      givingBack = rollBackAndRelease(tools, context, 'before_handler', true);
      void givingBack.then(() => shared?.resolve({ claimAgain: true }));
    };
    // Unsubscribed before the handler settled: answered from outside.
    return () => answeredOutside?.(false);
  });
}
