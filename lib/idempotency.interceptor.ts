import {
  type CallHandler,
  type ExecutionContext,
  HttpException,
  Inject,
  Injectable,
  Logger,
  type NestInterceptor,
} from '@nestjs/common';
import { HttpAdapterHost, Reflector } from '@nestjs/core';
import { type ServerResponse } from 'node:http';
import { catchError, mergeMap, Observable, throwError } from 'rxjs';
import { classifyCommitError, classifyHandlerError } from './failure.js';
import { onStreamError, renderResult, resultStream } from './http/handler-result.js';
import { answerProblem, PROBLEM_CONTENT_TYPE, problemResponse } from './http/problem.js';
import { pinContentType } from './http/pin-content-type.js';
import { holdResponse } from './http/response-hold.js';
import { rawResponse } from './http/raw-response.js';
import { replay } from './http/replay.js';
import { claimOrDecide, onFoundKey } from './storage/claim-or-decide.js';
import { readRequest } from './http/read-request.js';
import { defaultStatusOf, readRouteSettings, type RouteSettings } from './http/route-settings.js';
import { type ActiveClaim, IdempotencyContext, idempotencyStorage } from './idempotency-context.js';
import {
  IdempotencyError,
  IdempotencyKeyMismatchError,
  IdempotencyLeaseLostError,
  IdempotencyResponseTooLargeError,
  RetryLaterError,
} from './idempotency.errors.js';
import { RESOLVED_IDEMPOTENCY_OPTIONS } from './idempotency.module-definition.js';
import {
  type IdempotencyRequest,
  type ResolvedIdempotencyOptions,
  type ResolvedRouteOptions,
} from './idempotency-options.interface.js';
import { keyRetentionMs, ReplayCache } from './replay-cache.js';
import {
  type ClaimStore,
  isTransactional,
  type KeyScope,
} from './storage/claim-store.interface.js';
import { ClaimStores } from './storage/claim-stores.js';
import { IdempotencyDatabase } from './storage/idempotency-database.js';
import { type LazyTransaction } from './transaction/lazy-transaction.js';
import { type StoredResponse } from './stored-response.js';
import { isTransactionAbortedError } from './storage/connection-errors.js';
import { handleInTransaction } from './transaction/handle-in-transaction.js';
import { type IdempotencyEvent, publish } from './events/idempotency-events.js';

/**
 * The edge of the library: key -> fingerprint -> claim -> decide -> run or reply. It is kept
 * thin; every decision is a pure function, and every HTTP status comes from `toProblem()`.
 */
@Injectable()
export class IdempotencyInterceptor implements NestInterceptor {
  private readonly logger = new Logger('Idempotency');
  private readonly routes = new WeakMap<object, RouteSettings>();
  /**
   * Each claim's lease renewal on its way: a release waits for it, or a renewal that lands
   * after the key was given back would hold it again, and the retry would get 409s.
   */
  private readonly renewals = new WeakMap<ActiveClaim, Promise<unknown>>();

  constructor(
    private readonly reflector: Reflector,
    private readonly adapterHost: HttpAdapterHost,
    @Inject(RESOLVED_IDEMPOTENCY_OPTIONS) private readonly options: ResolvedIdempotencyOptions,
    private readonly stores: ClaimStores,
    private readonly database: IdempotencyDatabase,
    private readonly cache: ReplayCache,
  ) {}

  intercept(context: ExecutionContext, next: CallHandler): Observable<unknown> {
    if (context.getType() !== 'http') return next.handle();
    /** When the library's own work on this request began: the events report its duration. */
    const began = performance.now();
    const http = context.switchToHttp();
    const request = http.getRequest<IdempotencyRequest>();
    const response = http.getResponse<object>();
    const settings = this.routeSettings(context);
    const { route, httpCode, responseHandled, store } = settings;
    const defaultStatus = defaultStatusOf(httpCode, request.method);

    const reading = readRequest(request, route, this.options.tenant, settings.name);
    if (reading.kind === 'keyless')
      return this.runWithoutKey(defaultStatus, rawResponse(response), next);
    if (reading.kind === 'refused') {
      if (reading.warning) this.logger.warn(reading.warning);
      return this.fail(response, reading.error);
    }
    const { scope, fingerprint } = reading;
    const raw = rawResponse(response);
    const execute = (claim: ActiveClaim) =>
      this.execute(claim, fingerprint, settings, defaultStatus, response, next);

    const event = () => ({
      route: settings.name,
      tenant: scope.tenantId,
      key: scope.key,
      durationMs: performance.now() - began,
    });
    const answer = (stored: StoredResponse, fromMemory: boolean) => {
      publish('replayed', () => ({ ...event(), status: stored.status, fromMemory }));
      return replay(raw, stored, responseHandled);
    };
    // A retry of a key this process saw finish: decided and replayed without a query.
    const cached = this.cache.get(scope.tenantId, scope.key, performance.now());
    if (cached) {
      const found = onFoundKey({ state: 'done', ...cached }, fingerprint);
      if (found.kind === 'replay') return answer(found.response, true);
      publish('mismatch', event);
      return this.fail(response, new IdempotencyKeyMismatchError());
    }
    return claimOrDecide(store, scope, fingerprint, route.leaseMs, event, this.logger).pipe(
      mergeMap((claimed) => {
        if (claimed.kind === 'owned') return execute(claimed.claim);
        if (claimed.finishedAgeMs !== undefined) {
          this.remember(scope, fingerprint, claimed.response, store, claimed.finishedAgeMs);
        }
        return answer(claimed.response, false);
      }),
      catchError((error: unknown) =>
        error instanceof IdempotencyError ? this.fail(response, error) : throwError(() => error),
      ),
    );
  }

  /**
   * Runs the handler as the key's owner, in the request's transaction (opened by its first
   * write). The response the adapter writes is held until the transaction commits it with the
   * handler's effects (fenced by the claim), so a client never receives an answer that a retry
   * could not replay, and a retry after any failure finds either nothing done or all of it.
   */
  private execute(
    claim: ActiveClaim,
    fingerprint: Buffer,
    settings: RouteSettings,
    defaultStatus: number,
    response: object,
    next: CallHandler,
  ): Observable<unknown> {
    const { route } = settings;
    const raw = rawResponse(response);
    const transaction = this.database.transaction(false);
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
    const letThrough = holdResponse(
      raw,
      async (written) => {
        if (givingBack) {
          // Not the handler's answer: not stored, and sent once the key is free again.
          await givingBack;
          return undefined;
        }
        if (streamFailure) return this.giveBackBrokenStream(context, streamFailure.error);
        const answer = handlerError ? written : (context.finished ?? written);
        // finish()'s own answer is measured too: it is what would be stored.
        if (answer.body.length > route.maxResponseBytes) {
          return this.commit(context, fingerprint, this.tooLarge(route), true);
        }
        const stored = await this.commit(context, fingerprint, answer, handlerError);
        return stored === written ? undefined : stored;
      },
      // Only a bug in the commit path gets here: nothing is stored, the lease runs out.
      (error) => this.problemResponse(classifyCommitError(error)),
      {
        maxBytes: route.maxResponseBytes,
        // Too large to store: the handler's effects roll back, and the 500 is its final
        // answer (a retry would only grow the same response again, and on a route that is not
        // atomic repeat its writes).
        // A stream that failed past the limit changes nothing: whole, it was too large too.
        onOverflow: () => this.commit(context, fingerprint, this.tooLarge(route), true),
      },
      route.storedHeaders,
    );
    const stopHeartbeat = route.heartbeat ? this.startHeartbeat(settings.store, claim) : undefined;

    return new Observable<unknown>((subscriber) => {
      let settled = false;
      let detached = false;
      let result: unknown;
      const settle = () => {
        settled = true;
        stopHeartbeat?.();
      };
      const inner = runInContext(context, next).subscribe({
        next: (value) => {
          result = value;
          const stream = resultStream(value);
          // Watched before the adapter gets it, so the failure is known when it ends the reply.
          if (stream) onStreamError(stream, (error) => (streamFailure = { error }));
          if (!detached) subscriber.next(value);
        },
        error: (error: unknown) => {
          settle();
          if (detached) {
            void this.settleDetached(context, fingerprint, settings, { error });
            return;
          }
          this.onHandlerError(context, response, letThrough, error).then(
            (mapped) => {
              handlerError = mapped === error && context.handlerStarted;
              subscriber.error(mapped);
            },
            (unexpected: unknown) => subscriber.error(unexpected),
          );
        },
        complete: () => {
          settle();
          if (detached) void this.settleDetached(context, fingerprint, settings, { value: result });
          else subscriber.complete();
        },
      });
      return () => {
        if (settled) return;
        // Unsubscribed before the handler's answer (an outer timeout interceptor, say): what
        // goes out now is not the handler's answer, so it is not stored.
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
        givingBack = transaction
          .rollback()
          .then(() => this.releaseQuietly(context, true))
          .then(() =>
            publish('released', () => ({ ...eventOf(context), reason: 'before_handler' })),
          );
      };
    });
  }

  /**
   * Commits the request's transaction with `answer` as the stored response; returns what goes
   * out: `answer`, or the problem that replaces it when it could not be stored. A handler that
   * threw has its effects rolled back and its error answer stored on its own.
   */
  private async commit(
    context: IdempotencyContext,
    fingerprint: Buffer,
    answer: StoredResponse,
    handlerFailed: boolean,
  ): Promise<StoredResponse> {
    const claim = context.claim!;
    const transaction = context.transaction!;
    if (!this.options.storeIf(answer.status)) {
      // Not to be stored (storeIf): nothing of the request stays either; a retry runs it.
      await transaction.rollback();
      await this.releaseQuietly(context, false);
      publish('released', () => ({ ...eventOf(context), reason: 'store_if' }));
      return answer;
    }
    const began = performance.now();
    try {
      if (handlerFailed) await transaction.rollback();
      const stored = await this.finish(context, answer, handlerFailed ? undefined : transaction);
      if (!stored) {
        publish('leaseLost', () => eventOf(context));
        return this.problemResponse(new IdempotencyLeaseLostError());
      }
      this.remember(claim, fingerprint, answer, context.claimStore!, 0);
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
      await this.releaseQuietly(context, false);
      this.logger.warn(`the response of key ${claim.key} was not stored: ${String(error)}`);
      const problem = classifyCommitError(error);
      publish('released', () => ({ ...eventOf(context), reason: problem.code }));
      return this.problemResponse(problem);
    }
  }

  /**
   * The stream the handler returned failed before it was complete: the handler's effects roll
   * back and the key is given back, so that a retry runs it again and, if its stream completes
   * then, gets the whole body. Nothing has left the process (the hold kept it), so the client
   * gets a clean 503 in place of the broken answer.
   */
  private async giveBackBrokenStream(
    context: IdempotencyContext,
    error: unknown,
  ): Promise<StoredResponse> {
    await context.transaction!.rollback();
    await this.releaseQuietly(context, false);
    this.logger.warn(`the response stream of key ${context.claim!.key} failed: ${String(error)}`);
    const problem = new RetryLaterError(STREAM_FAILED, 1);
    publish('released', () => ({ ...eventOf(context), reason: problem.code }));
    return this.problemResponse(problem);
  }

  /**
   * What a failure of the request means (see `classifyHandlerError`); returns the error that
   * goes on to Nest's exception filters.
   */
  private async onHandlerError(
    context: IdempotencyContext,
    response: object,
    letThrough: () => void,
    error: unknown,
  ): Promise<unknown> {
    const transaction = context.transaction!;
    if (!context.handlerStarted) {
      // Failed in a guard, pipe or interceptor: nothing ran, so the key is given back.
      letThrough();
      await transaction.rollback();
      await this.releaseQuietly(context, true);
      publish('released', () => ({ ...eventOf(context), reason: 'before_handler' }));
      return error instanceof IdempotencyError ? this.toHttp(response, error) : error;
    }
    // A handler that caught a deadlock and went on fails next with "transaction aborted":
    // what the request met is the deadlock.
    const cause = isTransactionAbortedError(error) ? (transaction.lastError ?? error) : error;
    const failure = classifyHandlerError(cause);
    if (failure.kind === 'final') return error;
    letThrough();
    await transaction.rollback();
    // Nothing final happened: the work resumes when the client retries with the same key.
    if (failure.kind === 'retry') {
      await this.releaseQuietly(context, false);
      publish('released', () => ({ ...eventOf(context), reason: failure.error.code }));
    } else {
      publish('leaseLost', () => eventOf(context));
    }
    return this.toHttp(response, failure.error);
  }

  /**
   * The handler settled after an outer interceptor had answered for it: its own answer is
   * committed with its effects now, for the retries to replay. One that failed is rolled back
   * and its key given back, so that a retry runs it again and gets its real answer.
   */
  private async settleDetached(
    context: IdempotencyContext,
    fingerprint: Buffer,
    settings: RouteSettings,
    outcome: { value: unknown } | { error: unknown },
  ): Promise<void> {
    const claim = context.claim!;
    const transaction = context.transaction!;
    try {
      // A stream (a file) is sent by the adapter, which no longer will: what it would have
      // carried is not known here, so it is no answer to store, and the retry runs again.
      const stream = 'value' in outcome ? resultStream(outcome.value) : undefined;
      stream?.destroy();
      if ('error' in outcome || settings.responseHandled || stream) {
        await transaction.rollback();
        await this.releaseQuietly(context, false);
        return;
      }
      const rendered =
        context.finished ??
        renderResult(
          outcome.value,
          context.defaultStatus,
          settings.headers,
          this.adapterHost.httpAdapter.getType(),
        );
      const overflow = rendered.body.length > settings.route.maxResponseBytes;
      if (overflow) await transaction.rollback();
      const answer = overflow ? this.tooLarge(settings.route) : rendered;
      if (!this.options.storeIf(answer.status)) {
        await transaction.rollback();
        await this.releaseQuietly(context, false);
        publish('released', () => ({ ...eventOf(context), reason: 'store_if' }));
        return;
      }
      if (await this.finish(context, answer, overflow ? undefined : transaction)) {
        this.remember(claim, fingerprint, answer, context.claimStore!, 0);
        publish('stored', () => ({ ...eventOf(context), status: answer.status }));
      } else {
        this.logger.warn(`key ${claim.key}: lease lost before the late answer was stored`);
      }
    } catch (error) {
      await transaction.rollback();
      await this.releaseQuietly(context, false);
      this.logger.warn(`the late answer of key ${claim.key} was not stored: ${String(error)}`);
    }
  }

  /**
   * A request without a key on a route whose key is optional: nothing is claimed or stored,
   * but its phases run (as plain transactions) and a `respond()` status still goes out.
   */
  private runWithoutKey(defaultStatus: number, raw: ServerResponse, next: CallHandler) {
    const context = new IdempotencyContext(undefined, defaultStatus);
    holdResponse(
      raw,
      async () => context.finished,
      () => undefined,
    );
    return runInContext(context, next);
  }

  /**
   * Extends the lease while the handler runs, so that a short lease (a fast takeover after a
   * real crash) does not hand a slow but live worker's key to another one.
   */
  private startHeartbeat(store: ClaimStore, claim: ActiveClaim): () => void {
    const timer = setInterval(
      () => {
        const renewal = store.extendLease(claim).then(
          (held) => {
            if (!held) clearInterval(timer);
          },
          (error: unknown) =>
            this.logger.warn(`heartbeat of key ${claim.key} failed: ${String(error)}`),
        );
        this.renewals.set(claim, renewal);
      },
      Math.max(50, Math.floor(claim.leaseMs / 3)),
    );
    timer.unref();
    return () => clearInterval(timer);
  }

  /**
   * Keeps a finished key in this process's memory, for the retries that come back here, never
   * longer than `store` keeps it: a store that expires its keys on its own (Redis) may drop
   * them well before the module's retention.
   */
  private remember(
    scope: KeyScope,
    fingerprint: Buffer,
    response: StoredResponse,
    store: ClaimStore,
    finishedAgeMs: number,
  ): void {
    const retentionMs = keyRetentionMs(this.options.retentionMs, store.expiresKeysAfterMs);
    this.cache.set(
      scope.tenantId,
      scope.key,
      fingerprint,
      response,
      retentionMs - finishedAgeMs,
      performance.now(),
    );
  }

  /**
   * Stores the answer: in the request's transaction, with the handler's effects, when it is
   * given and the store is in the app's database; on its own otherwise. A store outside the
   * database serves only routes that are not atomic (the start-up check), whose transaction
   * holds nothing of the handler's.
   */
  private async finish(
    context: IdempotencyContext,
    answer: StoredResponse,
    transaction: LazyTransaction | undefined,
  ): Promise<boolean> {
    const store = context.claimStore!;
    const claim = context.claim!;
    if (transaction && isTransactional(store)) return store.finishIn(claim, answer, transaction);
    await transaction?.rollback();
    return store.finish(claim, answer);
  }

  private async releaseQuietly(context: IdempotencyContext, forget: boolean): Promise<void> {
    const claim = context.claim!;
    await this.renewals.get(claim);
    return context.claimStore!.release(claim, forget).catch((releaseError: unknown) => {
      // The lease then simply runs out, and a retry takes the key over.
      this.logger.warn(`could not release key ${claim.key}: ${String(releaseError)}`);
    });
  }

  private fail(response: object, error: IdempotencyError): Observable<never> {
    return throwError(() => this.toHttp(response, error));
  }

  /** The library's error as the HttpException the filters render, its headers set. */
  private toHttp(response: object, error: IdempotencyError): HttpException {
    const answer = this.answer(error);
    const adapter = this.adapterHost.httpAdapter;
    for (const [name, value] of Object.entries(answer.headers)) {
      adapter.setHeader(response, name, value);
    }
    pinContentType(rawResponse(response), answer.headers['content-type'] ?? PROBLEM_CONTENT_TYPE);
    return new HttpException(answer.body, answer.status, { cause: error });
  }

  /** Every answer of the library's is made here: the problem, in the app's shape if it has one. */
  private answer(error: IdempotencyError) {
    return answerProblem(error, this.options.renderProblem, this.renderFailed);
  }

  /** The answer as bytes, for the paths that write (and store) it themselves. */
  private problemResponse(error: IdempotencyError): StoredResponse {
    return problemResponse(error, this.options.renderProblem, this.renderFailed);
  }

  /** The final answer of a response too large to store: a 500 that is itself stored. */
  private tooLarge(route: ResolvedRouteOptions): StoredResponse {
    return this.problemResponse(new IdempotencyResponseTooLargeError(route.maxResponseBytes));
  }

  private readonly renderFailed = (reason: unknown) =>
    this.logger.error(`renderProblem failed, the problem went out as it is: ${String(reason)}`);

  /** A route's settings, read from its metadata once and kept for the next requests. */
  private routeSettings(context: ExecutionContext): RouteSettings {
    const handler = context.getHandler();
    let settings = this.routes.get(handler);
    if (!settings) {
      settings = readRouteSettings(context, this.reflector, this.options, this.stores);
      this.routes.set(handler, settings);
    }
    return settings;
  }
}

/**
 * Runs the handler inside the request's async context: Nest calls the handler when the
 * observable is subscribed to, so the subscription is what runs inside the context.
 */
function runInContext(context: IdempotencyContext, next: CallHandler): Observable<unknown> {
  return new Observable<unknown>((subscriber) =>
    idempotencyStorage.run(context, () =>
      handleInTransaction(context.transaction, next, subscriber),
    ),
  );
}

/** The event payload of an owned request: its route, tenant and key. */
function eventOf(context: IdempotencyContext): IdempotencyEvent {
  return { route: context.route, tenant: context.claim!.tenantId, key: context.claim!.key };
}

const STREAM_FAILED =
  'The response stream failed before it was complete; nothing was stored. Retry with the same key.';
