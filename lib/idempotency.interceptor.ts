import {
  type CallHandler,
  type ExecutionContext,
  Inject,
  Injectable,
  Logger,
  type NestInterceptor,
} from '@nestjs/common';
import { HttpAdapterHost, Reflector } from '@nestjs/core';
import { catchError, EMPTY, finalize, from, mergeMap, Observable, of, tap, throwError } from 'rxjs';
import { publish } from './events/idempotency-events.js';
import { keepRequestScopedBatches } from './prisma-request-clients.js';
import { type FieldSteps, interceptField } from './graphql/intercept-field.js';
import { problemAnswer } from './graphql/graphql-problem.js';
import { watchFastifySerialization } from './http/handler-result.js';
import { answerProblem, problemResponse } from './http/problem.js';
import { rawResponse } from './http/raw-response.js';
import { readRequest } from './http/read-request.js';
import { replay } from './http/replay.js';
import { defaultStatusOf, readRouteSettings, type RouteSettings } from './http/route-settings.js';
import { warnOnCallOut } from './http/call-out-warning.js';
import { claimWithWork } from './http/claim-with-work.js';
import {
  claimingNow,
  latestRun,
  RequestRun,
  retryTarget,
  runsOf,
  startRun,
} from './http/earlier-run.js';
import { chainOf } from './http/end-of-chain.js';
import { runOwned } from './http/run-owned.js';
import { forgetLibraryAnswers } from './http/to-http.js';
import { runWithoutKey } from './http/run-without-key.js';
import { toHttpException } from './http/to-http.js';
import { type ActiveClaim } from './shapes/active-claim.js';
import { IdempotencyError, IdempotencyKeyMismatchError } from './shapes/idempotency.errors.js';
import { RESOLVED_IDEMPOTENCY_OPTIONS } from './idempotency.module-definition.js';
import {
  type IdempotencyRequest,
  type ResolvedIdempotencyOptions,
} from './shapes/idempotency-options.interface.js';
import { keyRetentionMs, ReplayCache } from './answer/replay-cache.js';
import { claimOrDecide, onFoundKey } from './http/claim-or-decide.js';
import { isTransactional } from './shapes/claim-store.interface.js';
import { ClaimStores } from './claim-stores.js';
import { IdempotencyDatabase } from './data-layers/idempotency-database.js';
import { LeaseRenewals } from './claim/lease-renewals.js';
import { type StoredResponse } from './shapes/stored-response.js';
import { type OwnerTools } from './transaction/owner-tools.js';
import { type RequestTransaction } from './transaction/request-transaction.js';

/**
 * The edge of the library: key -> fingerprint -> claim -> decide -> run or reply. It is kept
 * thin; every decision is a pure function, and every HTTP status comes from `toProblem()`.
 */
@Injectable()
export class IdempotencyInterceptor implements NestInterceptor {
  private readonly logger = new Logger('Idempotency');
  private readonly routes = new WeakMap<object, RouteSettings>();
  /** What the steps of a request that owns its key share (see `OwnerTools`). */
  private readonly tools: OwnerTools;
  /** What the steps of a GraphQL mutation field take (see `interceptField`). */
  private readonly fields: FieldSteps;

  constructor(
    private readonly reflector: Reflector,
    private readonly adapterHost: HttpAdapterHost,
    @Inject(RESOLVED_IDEMPOTENCY_OPTIONS) private readonly options: ResolvedIdempotencyOptions,
    private readonly stores: ClaimStores,
    private readonly database: IdempotencyDatabase,
    private readonly cache: ReplayCache,
  ) {
    // Fastify serializes after Nest's filters could see a failure: noted by a hook.
    watchFastifySerialization(adapterHost.httpAdapter?.getInstance?.());
    const renderFailed = (reason: unknown) =>
      this.logger.error(`renderProblem failed, the problem went out as it is: ${String(reason)}`);
    const { renderProblem } = options;
    this.tools = {
      options,
      logger: this.logger,
      renewals: new LeaseRenewals(this.logger),
      problem: (error) => problemResponse(error, renderProblem, renderFailed),
      toHttp: (response, error) =>
        toHttpException(
          adapterHost.httpAdapter,
          response,
          answerProblem(error, renderProblem, renderFailed),
          error,
        ),
      remember: (scope, fingerprint, response, store, finishedAgeMs) =>
        cache.set(
          scope.tenantId,
          scope.key,
          fingerprint,
          response,
          keyRetentionMs(options.retentionMs, store.expiresKeysAfterMs) - finishedAgeMs,
          performance.now(),
        ),
      adapterType: () => adapterHost.httpAdapter.getType(),
    };
    this.fields = {
      options,
      // A field's problems are stored and answered as GraphQL errors, never as HTTP answers.
      tools: {
        ...this.tools,
        problem: problemAnswer,
        toHttp: () => {
          throw new Error('a GraphQL field has no HTTP answer of its own');
        },
      },
      database,
      cache,
      logger: this.logger,
    };
  }

  intercept(context: ExecutionContext, next: CallHandler): Observable<unknown> {
    // A Prisma client provided per request is first met here, before its handler's calls.
    if (this.options.pool) keepRequestScopedBatches(context);
    // A mutation field of @nestjs/graphql: read by its name, nothing of it is imported.
    if (context.getType<string>() === 'graphql') {
      return interceptField(this.fields, this.routeSettings(context), context, next);
    }
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
      return runWithoutKey(defaultStatus, rawResponse(response), next);
    if (reading.kind === 'refused') {
      if (reading.warning) this.logger.warn(reading.warning);
      return this.fail(response, reading.error);
    }
    const { scope, fingerprint } = reading;
    const raw = rawResponse(response);
    // An answer of the library's made for a run of this request before this one, and not
    // written (the app's retry took it), is not this run's: its headers go. After a handler's
    // error, only once this run is known to be the app's retry of it (`retryOf` below): an
    // audit told that error leaves its answer as it is written.
    if (!latestRun(raw)?.handedOn) forgetLibraryAnswers(response);
    const execute = (claim: ActiveClaim, transaction?: RequestTransaction) =>
      runOwned(
        this.tools,
        this.database,
        claim,
        fingerprint,
        settings,
        defaultStatus,
        response,
        next,
        transaction,
        run,
      );

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
    // One commit for a new key (`oneCommit`): claimed in the request's own transaction.
    const claim = () =>
      route.oneCommit && isTransactional(store) && store.claimIn
        ? claimWithWork(
            store,
            this.database.transaction(false),
            scope,
            fingerprint,
            route,
            event,
            this.logger,
            (landed) => (landing = landed),
          )
        : claimOrDecide(
            store,
            scope,
            fingerprint,
            route.leaseMs,
            event,
            this.logger,
            route.conflictRetryAfterSeconds,
            (landed) => (landing = landed),
          );
    /** A claim of this run still on its way when the run was unsubscribed (see `left`). */
    let landing: Promise<unknown> | undefined;
    const claimAndRun = () =>
      claim().pipe(
        // Decided on its outcome, or when it ends without one (an error, an unsubscribe: then
        // once a claim still in flight has landed and been given back; the teardowns that
        // note it run together, so it is read a microtask later).
        tap(() => run.claimDecided()),
        finalize(() => queueMicrotask(() => run.claimDecided(landing))),
        mergeMap((claimed) => {
          if (claimed.kind === 'owned') return execute(claimed.claim, claimed.transaction);
          if (claimed.finishedAgeMs !== undefined) {
            this.tools.remember(scope, fingerprint, claimed.response, store, claimed.finishedAgeMs);
          }
          return answer(claimed.response, false);
        }),
        catchError((error: unknown) =>
          error instanceof IdempotencyError ? this.fail(response, error) : throwError(() => error),
        ),
      );
    // A run of this very request before this one (see earlier-run.ts), once its claim is
    // decided: failed (the app retries it), it steps aside and the key is claimed again; its
    // handler still working or its value on its way (a second subscription, a late one), this
    // run answers with what it comes to.
    const run = new RequestRun();
    const earlier = startRun(raw, run);
    if (!earlier) return claimAndRun();
    // The failed run this one is the app's retry of, read from its chain as it subscribes
    // (see `retryTarget`); an audit's chain runs into none.
    let retried: RequestRun | undefined;
    const retryOf = () => {
      if (!retried) return undefined;
      // The library's answers made for the run it retries are not its own (see above).
      forgetLibraryAnswers(response);
      return retried;
    };
    // Until it claims (its own run then says), a later run after this one meets the run this
    // one follows now: this one may be unsubscribed while it waits, having done nothing of its
    // own; it is then decided once what it waited for is (that run's claim as it is then, a
    // claim made anew included, or its stepping aside).
    let following = earlier;
    // A retry of this run, which took its outcome from the one it follows, retries that one.
    run.stepAside = (of) => following.stepAside?.(of === run ? following : of);
    run.outcome = (of) => following.outcome?.(of === run ? following : of);
    let steppedAside: Promise<unknown> | undefined;
    let claiming = false;
    // Later runs claim one after another (several told to claim again by one give-back, or
    // one told so while another found the key free): a run that finds another claiming meets
    // it as any later run does, rather than race it for the key.
    const claimAfter = (): Observable<unknown> => {
      // The request is answered already (an audit that subscribed after its answer went out):
      // nobody would get what this run does, so it runs nothing and claims nothing. (An app's
      // retry runs before the answer is written: the answer is what the retry comes to; or,
      // of a run in the background after an answer given at once, 202, it runs in the
      // background too, and commits with its own answer.)
      if (raw.writableEnded && !retried) return EMPTY;
      const other = claimingNow(raw, run);
      if (other) return follow(other);
      claiming = true;
      return claimAndRun();
    };
    const follow = (before: RequestRun): Observable<unknown> => {
      following = before;
      return from(before.claimed).pipe(
        mergeMap(() => {
          const retrying = retryOf();
          const steppingAside = before.stepAside?.(retrying);
          if (steppingAside) {
            steppedAside = steppingAside;
            return from(steppingAside).pipe(mergeMap(claimAfter));
          }
          const outcome = before.outcome?.(retrying);
          if (!outcome) return claimAfter();
          // Joined, this run owns nothing: a run after it meets the one it joined (a third
          // subscription would claim again, and its 409 be stored with the first run's work).
          run.joined = before.joined ?? before;
          run.claimDecided();
          return from(outcome).pipe(
            mergeMap((came) => {
              if ('error' in came) {
                // Handed on as this run's: the app's retry of it retries the run it joined.
                return new Observable<never>((subscriber) => run.handOn(subscriber, came.error));
              }
              if ('value' in came) return came.values ? from(came.values) : of(came.value);
              // Told to claim again, with every run that joined the same one: undecided until
              // it has claimed (or joined the one that claims first).
              run.claimAnew();
              return claimAfter();
            }),
          );
        }),
      );
    };
    return new Observable<unknown>((subscriber) => {
      // The run this one retries, where it may run the handler again (see `retryTarget`):
      // followed directly, it steps aside for this one.
      retried = retryTarget(runsOf(raw), run, chainOf(subscriber));
      return follow(retried ?? earlier)
        .pipe(
          finalize(() => {
            run.gone = true;
            if (!claiming) run.claimDecided(steppedAside ?? following.claimed);
          }),
        )
        .subscribe(subscriber);
    });
  }

  private fail(response: object, error: IdempotencyError): Observable<never> {
    return throwError(() => this.tools.toHttp(response, error));
  }

  /** A route's settings, read from its metadata once and kept for the next requests. */
  private routeSettings(context: ExecutionContext): RouteSettings {
    const handler = context.getHandler();
    let settings = this.routes.get(handler);
    if (!settings) {
      settings = readRouteSettings(context, this.reflector, this.options, this.stores);
      this.routes.set(handler, settings);
      // A route whose claim commits with its work should not call out before it commits.
      if (settings.route.oneCommit) warnOnCallOut(this.logger);
    }
    return settings;
  }
}
