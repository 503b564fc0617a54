import { type CallHandler, type ExecutionContext, type Logger } from '@nestjs/common';
import { catchError, from, mergeMap, Observable, of, throwError } from 'rxjs';
import { publish } from '../events/idempotency-events.js';
import { type RouteSettings } from '../http/route-settings.js';
import { IdempotencyContext } from '../transaction/idempotency-context.js';
import { IdempotencyError, IdempotencyKeyMismatchError } from '../shapes/idempotency.errors.js';
import { InvalidIdempotencyOptionsError } from '../idempotency-options.js';
import { type ResolvedIdempotencyOptions } from '../shapes/idempotency-options.interface.js';
import { type ReplayCache } from '../answer/replay-cache.js';
import { chainOf } from '../http/end-of-chain.js';
import { type ClaimResult, claimOrDecide, onFoundKey } from '../http/claim-or-decide.js';
import { idOf } from '../claim/claim-batcher.js';
import { type IdempotencyEvent } from '../events/idempotency-events.js';
import { type KeyScope } from '../shapes/claim-store.interface.js';
import { type IdempotencyDatabase } from '../data-layers/idempotency-database.js';
import { type StoredResponse } from '../shapes/stored-response.js';
import { type OwnerTools } from '../transaction/owner-tools.js';
import { runInContext } from '../transaction/run-in-context.js';
import { readGraphqlField } from './graphql-field.js';
import { type GraphqlModule, loadGraphql } from './graphql-module.js';
import { readField } from './read-field.js';
import { notingOwnLocated } from './jit-located.js';
import { markReplayed } from './replay-marker.js';
import { calledKind, resolverProblem } from './resolver-placement.js';
import { type ActiveClaim } from '../shapes/active-claim.js';
import {
  FieldRun,
  goesOnFrom,
  inheritsClaim,
  laterRunStep,
  retriedRun,
  startFieldRun,
} from './field-runs.js';
import { pathOf, waitingFor } from './stored-at-answer.js';
import { answerOf, problemThrown, runField } from './run-field.js';
import { decodeAnswer } from './field-answer.js';
import { answerOutputsOf } from './middleware-outputs.js';
import { answerPlacedReadsOf } from './placed-reads.js';
import {
  completedInOperation,
  completingFor,
  noteReplayedOutputs,
  pendingBoundMs,
  pendingWaitMs,
} from './output-paths.js';

/** What the GraphQL steps take from the interceptor. */
export interface FieldSteps {
  readonly options: ResolvedIdempotencyOptions;
  /** The owner's tools, their `problem` answering as a field does (`problemAnswer`). */
  readonly tools: OwnerTools;
  readonly database: IdempotencyDatabase;
  readonly cache: ReplayCache;
  readonly logger: Logger;
}

/**
 * The interceptor's steps on a GraphQL mutation field: read the field -> key, tenant and
 * fingerprint -> claim or decide -> run as owner (or replay, or refuse). The same steps as a
 * route's, one record per field; refusals are GraphQL errors (see `problemError`).
 */
export function interceptField(
  steps: FieldSteps,
  settings: RouteSettings,
  context: ExecutionContext,
  next: CallHandler,
): Observable<unknown> {
  const run = new FieldRun();
  const info = context.getArgs()[3];
  const latest = goesOnFrom(startFieldRun(info, run));
  const claimed = (taken?: ActiveClaim) =>
    from(loadGraphql()).pipe(
      mergeMap((graphql) => fieldSteps(steps, settings, context, next, graphql, run, taken)),
    );
  return tracked(run, (chain) => {
    // The run whose error this one retries, else the latest: a run goes on from it.
    const earlier = retriedRun(info, run, chain) ?? latest;
    const seen = earlier && {
      ended: earlier.ended,
      left: earlier.left,
      takeClaim: earlier.takeClaim,
      errorHeld: earlier.retriedBy(chain),
    };
    switch (laterRunStep(seen)) {
      case 'join': {
        // Both runs at once (one on the side, or one late): the resolver runs once, for both.
        run.joined = earlier;
        // Joined as GraphQL subscribed (the returned run beside an audit that subscribed
        // first): this run's retry is the app's retry of the try, and may take its claim
        // over. Joined later (an audit made while the resolver works, or after it failed):
        // this run is told the error, and so is its own retry (see `inheritsClaim`).
        const inherits = inheritsClaim(earlier!);
        return from(earlier!.result).pipe(
          mergeMap((result) => {
            if (inherits) run.takeClaim = earlier!.takeClaim;
            if ('value' in result) return of(result.value);
            if ('error' in result) return throwError(() => result.error);
            return claimed();
          }),
        );
      }
      case 'take-claim':
        // The app's retry of a failed try: its error is never stored, and this run owns the key.
        return claimed(earlier!.takeClaim!());
      default:
        return claimed();
    }
  });
}

/**
 * `source()` subscribed, what it gives told to `run` before the subscriber hears it: a later
 * run started from the subscriber (a retry, as its error is delivered) finds it ended.
 */
function tracked(
  run: FieldRun,
  source: (chain: readonly object[]) => Observable<unknown>,
): Observable<unknown> {
  return new Observable<unknown>((subscriber) => {
    let value: unknown;
    // Its own chain, as it subscribes: the app's retry of an earlier run runs into that run's.
    const subscription = source(chainOf(subscriber)).subscribe({
      next: (emitted) => {
        value = emitted;
        subscriber.next(emitted);
      },
      error: (error: unknown) => {
        run.end({ error });
        // The app's `retry()` takes the error and subscribes again (at once, after a delay,
        // or through an interceptor that awaits before it hands on): the error stays in the
        // app's chain, whose end (GraphQL's) is still open (see `laterRunStep`, `endOfChain`).
        run.handOn(subscriber, error);
      },
      complete: () => {
        run.end({ value });
        subscriber.complete();
      },
    });
    return () => {
      subscription.unsubscribe();
      if (!run.ended) run.left = true;
      // Left before any answer: a run that joined this one claims the key, once a resolver
      // still going on here has stored its answer (then replayed), or a claim in flight has
      // been given back, not while either holds it. The teardowns that note them run
      // together, so it is read a microtask later.
      queueMicrotask(() => {
        const settling = run.detachedSettled;
        if (settling) void settling.then(() => run.end({ claimAgain: true }));
        else run.end({ claimAgain: true });
      });
    };
  });
}

function fieldSteps(
  steps: FieldSteps,
  settings: RouteSettings,
  context: ExecutionContext,
  next: CallHandler,
  graphql: GraphqlModule,
  run: FieldRun,
  taken: ActiveClaim | undefined,
): Observable<unknown> {
  const began = performance.now();
  const field = readGraphqlField(context.getArgs());
  // The start-up check refuses what this would; it only guards a resolver it could not see.
  const misplaced = resolverProblem(
    `@Idempotent() on ${settings.name}`,
    calledKind(field.operation, field.root),
  );
  if (misplaced) return throwError(() => new InvalidIdempotencyOptionsError(misplaced));
  const { store, route } = settings;
  const reading = readField(field, route, steps.options.tenant, graphql);
  if (reading.kind === 'keyless') {
    return runInContext(new IdempotencyContext(undefined, 200), next);
  }
  const fail = (error: IdempotencyError) => throwError(() => problemThrown(error, graphql));
  if (reading.kind === 'refused') return fail(reading.error);
  const { scope, fingerprint } = reading;
  const place = { context: context.getArgs()[2], path: pathOf(context.getArgs()[3]), run };
  // The key's owner already: the claim of the app's earlier try, handed over.
  if (taken) {
    return runField(steps.tools, steps.database, taken, fingerprint, settings, next, graphql, {
      types: field.types,
      place,
    });
  }
  const event = () => ({
    route: settings.name,
    tenant: scope.tenantId,
    key: scope.key,
    durationMs: performance.now() - began,
  });
  // One object at several places answers each place's own read of a field (placed-reads.ts),
  // under the middleware fields' wrappers, which read through it.
  answerPlacedReadsOf(graphql, field.types?.schema);
  // Its middleware fields answer their stored outputs on a replay (middleware-outputs.ts).
  answerOutputsOf(graphql, field.types?.schema);
  const answer = (stored: StoredResponse, fromMemory: boolean, finishedAgeMs?: number) => {
    publish('replayed', () => ({ ...event(), status: stored.status, fromMemory }));
    // Said in the answer's extensions (see replay-marker.ts), as Idempotent-Replayed on a route.
    markReplayed(context.getArgs()[2], field.responseKey);
    // Its error noted where it belongs, for Mercurius' `jit` (see jit-located.ts).
    const [, , gqlContext, info] = context.getArgs();
    // The key met again in the operation whose answer hook completes its outputs (the key
    // twice in one operation): that hook comes after this field, so nothing is waited for;
    // its middleware fields answer what the first answer's middleware gave (output-paths.ts).
    if (completedInOperation(idOf(scope), gqlContext)) {
      noteReplayedOutputs(gqlContext, { root: place.path, kind: 'operation', id: idOf(scope) });
      return from(
        notingOwnLocated(answerOf(stored, graphql, field.types, steps.logger), gqlContext, info),
      );
    }
    return from(
      withOutputs(settings, scope, fingerprint, stored, finishedAgeMs).then((settled) => {
        noteOutputsOf(gqlContext, place.path, settled);
        return notingOwnLocated(
          answerOf(settled, graphql, field.types, steps.logger),
          gqlContext,
          info,
        );
      }),
    );
  };
  // A retry of a key this process saw finish: decided and replayed without a query.
  const cached = steps.cache.get(scope.tenantId, scope.key, performance.now());
  if (cached) {
    const found = onFoundKey({ state: 'done', ...cached }, fingerprint);
    if (found.kind === 'replay') return answer(found.response, true);
    publish('mismatch', event);
    return fail(new IdempotencyKeyMismatchError());
  }
  // The same key's error waiting in this process for its operation's answer (the key twice
  // in one operation, an audit's own retry): stored first, then met as stored.
  const waiting = waitingFor(idOf(scope));
  return (waiting ? from(waiting.start()) : of(undefined)).pipe(
    mergeMap(() =>
      claimFor(steps, settings, scope, fingerprint, event, (landed) => {
        // Left while its claim was in flight: a run beside this one claims once that claim
        // has landed and been given back, not while it holds the key.
        run.detachedSettled = landed.then(
          () => undefined,
          () => undefined,
        );
      }),
    ),
    // The claim's refusals and failures; what the resolver throws is the field's own answer.
    catchError((error: unknown) =>
      error instanceof IdempotencyError ? fail(error) : throwError(() => error),
    ),
    mergeMap((claimed) => {
      if (claimed.kind === 'owned') {
        const { claim } = claimed;
        return runField(steps.tools, steps.database, claim, fingerprint, settings, next, graphql, {
          types: field.types,
          place,
        });
      }
      // An answer whose middleware outputs are pending is not kept: it is completed soon.
      if (claimed.finishedAgeMs !== undefined && !outputsPending(claimed.response)) {
        steps.tools.remember(scope, fingerprint, claimed.response, store, claimed.finishedAgeMs);
      }
      return answer(claimed.response, false, claimed.finishedAgeMs);
    }),
  );
}

/** The field's claim (see `claimOrDecide`). */
function claimFor(
  steps: FieldSteps,
  { store, route }: RouteSettings,
  scope: KeyScope,
  fingerprint: Buffer,
  event: () => IdempotencyEvent,
  left: (landed: Promise<unknown>) => void,
): Observable<ClaimResult> {
  return claimOrDecide(
    store,
    scope,
    fingerprint,
    route.leaseMs,
    event,
    steps.logger,
    route.conflictRetryAfterSeconds,
    left,
  );
}

/** Whether a stored answer's middleware outputs are pending (see middleware-outputs.ts). */
function outputsPending(stored: StoredResponse): boolean {
  const answer = decodeAnswer(stored);
  return answer?.kind === 'data' && answer.pending === true;
}

/** How often a replay asks the store again for an answer whose outputs are pending. */
const PENDING_POLL_MS = 50;

/**
 * The stored answer, its middleware outputs completed: a replay that meets them pending
 * waits, bounded from when the answer was stored (`pendingBoundMs`: until the lease would
 * lapse where its first call still resolves in this process, else a third of it), for the
 * completion in this process or in the store; past that (the first process died between the
 * two writes, or its client left before the answer), the answer as it is, still pending.
 */
async function withOutputs(
  { store, route }: RouteSettings,
  scope: KeyScope,
  fingerprint: Buffer,
  stored: StoredResponse,
  finishedAgeMs: number | undefined,
): Promise<StoredResponse> {
  if (!outputsPending(stored)) return stored;
  /** The stored answer now: completed, or as it was (purged meanwhile); undefined: pending. */
  const storedNow = async (): Promise<StoredResponse | undefined> => {
    const outcome = await store.claim(scope, fingerprint, route.leaseMs);
    if (outcome.kind === 'claimed') {
      // Purged meanwhile: the key is given back untouched, and the answer stays as it was.
      await store.release(outcome.claim, true);
      return stored;
    }
    const { existing } = outcome;
    return existing.state === 'done' && !outputsPending(existing.response)
      ? existing.response
      : undefined;
  };
  // Its first call still resolving in this process: known alive (see `pendingBoundMs`).
  const here = completingFor(idOf(scope));
  const waitMs = pendingWaitMs(finishedAgeMs, pendingBoundMs(route.leaseMs, here !== undefined));
  if (here) {
    const completed = await Promise.race([here, delay(waitMs)]);
    if (completed) return completed as StoredResponse;
    // Its hook ran without writing them, or the wait ended: the store asked once more.
    return (await storedNow()) ?? stored;
  }
  const deadline = performance.now() + waitMs;
  while (performance.now() < deadline) {
    await delay(Math.min(PENDING_POLL_MS, Math.max(0, deadline - performance.now())));
    const now = await storedNow();
    if (now) return now;
  }
  return stored;
}

function delay(ms: number): Promise<undefined> {
  return new Promise((resolve) => setTimeout(() => resolve(undefined), ms).unref());
}

/** Notes what the replayed field's middleware fields answer (see output-paths.ts). */
function noteOutputsOf(
  context: unknown,
  root: readonly (string | number)[],
  stored: StoredResponse,
): void {
  const answer = decodeAnswer(stored);
  if (answer?.kind !== 'data') return;
  if (answer.pending || answer.outputsLost) noteReplayedOutputs(context, { root, kind: 'pending' });
  else if (answer.outputs) {
    const { members, errors, names, told, nulled, lost, parents, outputsGraph } = answer;
    const outputs = { outputs: answer.outputs, members, errors, names, told, nulled, lost };
    const kept = { parents, outputsGraph };
    noteReplayedOutputs(context, { root, kind: 'stored', outputs: { ...outputs, ...kept } });
  }
  // Stored before outputs were (neither): its middleware runs again, as it did then.
}
