import { namedReader } from './node-classes.js';
import { type CallHandler, type Logger } from '@nestjs/common';
import { Observable } from 'rxjs';
import { publish } from '../events/idempotency-events.js';
import { classifyHandlerError, isTimeoutError } from '../transaction/failure.js';
import { isCancelled, outcomeStillToCome } from '../http/handler-result.js';
import { IdempotencyContext, type ActiveClaim } from '../transaction/idempotency-context.js';
import {
  IdempotencyError,
  IdempotencyResponseTooLargeError,
  IdempotencyStoredResponseUnreadableError,
} from '../shapes/idempotency.errors.js';
import { type RouteSettings } from '../http/route-settings.js';
import { type IdempotencyDatabase } from '../data-layers/idempotency-database.js';
import { type StoredResponse } from '../shapes/stored-response.js';
import { commitAnswer } from '../transaction/commit-answer.js';
import {
  eventOf,
  type OwnerTools,
  releaseQuietly,
  rollBackAndRelease,
} from '../transaction/owner-tools.js';
import { runInContext } from '../transaction/run-in-context.js';
import { type ErrorLocation } from './error-location.js';
import { decodeAnswer, encodeAnswer, type FieldError, fieldError } from './field-answer.js';
import { problemError } from './graphql-problem.js';
import { type FieldTypes } from './graphql-field.js';
import { type GraphqlModule } from './graphql-module.js';
import { type ReplayLoss, warnLosses, warnOnce } from './replay-loss.js';
import { resolvedFieldsUnder, warnResolvedFields } from './resolved-fields.js';
import { selectionOf } from './selection.js';
import { fromWire, KEPT, outputWire, PARENT_MEMBERS } from './wire-value.js';
import { parentDataWithin } from './parent-data-within.js';
import { type Graph } from './typed-graph.js';
import { thrownError } from './thrown-error.js';
import { type FieldRun } from './field-runs.js';
import { errorHttp, hasAnswerHook, pathOf, storeAtAnswer } from './stored-at-answer.js';
import { placeOfPath } from './read-places.js';
import { hasMiddlewareUnder } from './middleware-outputs.js';
import { parentsWithin } from './parents-within.js';
import { keptParents } from './app-parents.js';
import {
  awaitOutputs,
  noteCompleting,
  pendingBoundMs,
  type StoredOutputs,
} from './output-paths.js';
import { idOf } from '../claim/claim-batcher.js';

/** Where a field's run answers: its operation's GraphQL context, its path, its run. */
export interface FieldPlace {
  context: unknown;
  path: readonly (string | number)[];
  run: FieldRun;
}

/** An error's message as GraphQL answers it. */
function messageOf(error: unknown): string {
  return error instanceof Error ? error.message : String(error);
}

/**
 * How long a field's error waits for its operation's answer before it is stored anyway (a
 * client that left: no answer goes out): well within the key's lease, which nothing renews
 * meanwhile.
 */
export function storeWaitMs(leaseMs: number): number {
  return Math.min(10_000, Math.max(1, Math.floor(leaseMs / 3)));
}

/** How the resolver ended: its value, or what it threw. */
type Outcome = { value: unknown } | { error: unknown };

/**
 * Runs a mutation's resolver as the key's owner, in the field's transaction (opened by its
 * first write), and commits its answer with its effects, fenced by the claim, before GraphQL
 * gets it: a client never receives an answer that a retry could not replay, and a retry after
 * any failure finds either nothing done or all of it. Emits the stored value, or throws the
 * stored error.
 */
export function runField(
  tools: OwnerTools,
  database: IdempotencyDatabase,
  claim: ActiveClaim,
  fingerprint: Buffer,
  settings: RouteSettings,
  next: CallHandler,
  graphql: GraphqlModule,
  { types, place }: { types: FieldTypes | undefined; place?: FieldPlace },
): Observable<unknown> {
  const { route } = settings;
  const transaction = database.transaction(false);
  transaction.isolationLevel = route.isolationLevel;
  const context = new IdempotencyContext(claim, 200, transaction, route.atomic, settings.store);
  context.route = settings.name;
  const stopHeartbeat = route.heartbeat
    ? tools.renewals.heartbeat(settings.store, claim, transaction)
    : undefined;
  /**
   * Where its error waits for the operation's answer; none once detached (its answer went out
   * from outside, and no retry of the app's can take a try over that nobody watches): its
   * error is then stored when it comes, and `app.close()` waits for that.
   */
  let answerPlace = place;
  const settle = async (outcome: Outcome): Promise<unknown> => {
    // Renewed until the statements its resolver left running are done: its answer's commit
    // (or its error's, or the ROLLBACK) waits for them, and a lease run out meanwhile would let
    // a retry run the resolver again before that commit (see `heartbeatStop`).
    stopHeartbeat?.();
    if ('error' in outcome) {
      return failed(tools, context, fingerprint, outcome.error, graphql, answerPlace);
    }
    let answer: StoredResponse;
    /** What the first answer is given: the resolver's value, its lists as they were read. */
    let first: unknown;
    /** The stored value's wire form, which the middleware outputs complete at the answer. */
    let wire: unknown;
    /** Its objects that hold own data for the app's resolvers (`PARENT`), as written. */
    let holders: readonly object[] = [];
    /** Its objects whose `KEPT` names a node of `parentGraph` (kept whatever else goes). */
    let keptHolders: readonly object[] = [];
    /** Their own data, one graph for the answer (parent-graph.ts), stored beside it. */
    let parentGraph: Graph | undefined;
    /**
     * Field middleware may run under it: its outputs are stored as the operation's answer
     * gives them (middleware-outputs.ts), pending until then where a hook gives them, or none
     * (a replay then answers those fields an error) where no hook will.
     */
    const middleware = types ? hasMiddlewareUnder(graphql, types.schema, types.returnType) : false;
    const awaitsOutputs =
      middleware && answerPlace !== undefined && hasAnswerHook(answerPlace.context);
    try {
      // Stored as GraphQL writes it (a Date as its scalar's string): see wire-value.ts.
      const losses: ReplayLoss[] = [];
      // As far as the operation selects it (see selection.ts), its lists read once: the first
      // answer is given what was stored of them (a one-shot iterator is then spent).
      const walked = types
        ? await outputWire(
            graphql,
            types.schema,
            types.returnType,
            outcome.value,
            selectionOf(types.call.info),
            types.call,
            losses,
          )
        : { wire: outcome.value, value: outcome.value, parents: [] };
      first = walked.value;
      wire = walked.wire;
      holders = walked.parents ?? [];
      keptHolders = ('keptHolders' in walked ? walked.keptHolders : undefined) ?? [];
      parentGraph = 'parentGraph' in walked ? walked.parentGraph : undefined;
      // What a replay cannot give back as it was, said once per type (see replay-loss.ts).
      warnLosses(tools.logger, losses);
      // The fields resolved under it run again on a replay, outside its transaction.
      if (types) {
        warnResolvedFields(tools.logger, settings.name, () =>
          resolvedFieldsUnder(graphql, types.schema, types.returnType),
        );
      }
      const outputsState = awaitsOutputs
        ? { pending: true as const }
        : middleware
          ? { outputsLost: true as const }
          : {};
      answer = encodeAnswer({ kind: 'data', data: wire, parentGraph, ...outputsState });
      // Too large with the own data kept for the app's resolvers beyond the answer (`PARENT`:
      // a large unselected column): the largest left out, the answer stored (a replay's
      // resolvers read their parents as the answer holds them), not the work rolled back.
      const within = parentDataWithin(
        wire,
        holders,
        PARENT_MEMBERS,
        answer.body.length - route.maxResponseBytes,
        parentGraph,
        { holders: keptHolders, member: KEPT },
      );
      if (within) {
        const trimmed = encodeAnswer({
          kind: 'data',
          data: within.wire,
          parentGraph: within.graph,
          ...outputsState,
        });
        if (trimmed.body.length <= route.maxResponseBytes) {
          tools.logger.warn(
            `${parentDataLeftOut(within)} is not stored with the answer of ${settings.name}: ` +
              `with it the answer is over maxResponseBytes (${route.maxResponseBytes} bytes); ` +
              `${parentDataReplayed(within)}`,
          );
          wire = within.wire;
          holders = within.holders;
          keptHolders = within.pinnedHolders;
          parentGraph = within.graph;
          answer = trimmed;
        }
      }
    } catch (error) {
      // No JSON form (a cycle, a value its scalar refuses): it cannot be replayed, so it is
      // the field's error.
      return failed(tools, context, fingerprint, error, graphql, answerPlace);
    }
    const stored =
      answer.body.length > route.maxResponseBytes
        ? // Too large to store: the effects roll back, and the error is the field's answer.
          await commitAnswer(
            tools,
            context,
            fingerprint,
            tools.problem(new IdempotencyResponseTooLargeError(route.maxResponseBytes)),
            true,
          )
        : await commitAnswer(tools, context, fingerprint, answer, false);
    if (stored === answer && awaitsOutputs && answerPlace) {
      const claim = context.claim!;
      const store = context.claimStore!;
      // Completed at the operation's answer (`storeOutputsOf`), with one fenced UPDATE of the
      // finished row: no transaction is held meanwhile.
      let done: (stored: StoredResponse | undefined) => void = () => undefined;
      noteCompleting(idOf(claim), new Promise((resolve) => (done = resolve)), answerPlace.context);
      // Its client left before the answer (no hook will run): a replay here stops waiting,
      // at the latest when the lease would lapse (see `pendingBoundMs`).
      setTimeout(() => done(undefined), pendingBoundMs(claim.leaseMs, true)).unref();
      const completing = async (noted: StoredOutputs) => {
        try {
          // The outputs' parents written into one graph (app-parents.ts): what they share
          // once. What one does not give back as it was, said as for the resolver's value.
          const kept = keptParents(noted.parents ?? {});
          warnLosses(tools.logger, kept.losses);
          const { parents: _noted, ...bare } = noted;
          const outputs: StoredOutputs =
            Object.keys(kept.parents).length > 0
              ? { ...bare, parents: kept.parents, outputsGraph: kept.graph }
              : bare;
          let completed = encodeAnswer({ kind: 'data', data: wire, parentGraph, ...outputs });
          const overNow = () => completed.body.length - route.maxResponseBytes;
          // Too large with the kept parents' own data (an unselected large column): the
          // largest left out, the outputs stored (a replay's parent rebuilt from the answer).
          // First the outputs' parents (all of them where the largest are not enough), then
          // the value's own (`PARENT`, adversary 93: a 40 kB `bio` no client selects, kept
          // for an unselected `@ResolveField()`, crowded a 40 kB middleware output out).
          let fewer: StoredOutputs = outputs;
          /** What was left out, said once the answer is under the limit with it. */
          const said: string[] = [];
          if (overNow() > 0 && outputs.parents) {
            const within = parentsWithin(outputs.parents, overNow(), kept.graph);
            const { parents: all, outputsGraph: _graph, ...others } = outputs;
            const parents = within?.parents ?? {};
            const dropped = within?.dropped ?? Object.keys(all ?? {});
            fewer =
              Object.keys(parents).length > 0
                ? { ...others, parents, ...(within?.graph ? { outputsGraph: within.graph } : {}) }
                : others;
            completed = encodeAnswer({ kind: 'data', data: wire, parentGraph, ...fewer });
            said.push(
              `the own data of the parents at ${dropped.join(', ')} (read by @ResolveField() ` +
                `resolvers under field middleware) is not stored with the answer of key ` +
                `${claim.key}: with it the answer is over maxResponseBytes ` +
                `(${route.maxResponseBytes} bytes); a replay's resolver reads those parents ` +
                'as the answer holds them (their selected fields only)',
            );
          }
          const within = parentDataWithin(wire, holders, PARENT_MEMBERS, overNow(), parentGraph, {
            holders: keptHolders,
            member: KEPT,
          });
          if (within) {
            // With the parents' graph as few as it keeps reach (a wire and its graph go together).
            completed = encodeAnswer({
              kind: 'data',
              data: within.wire,
              parentGraph: within.graph,
              ...fewer,
            });
            said.push(
              `${parentDataLeftOut(within)} is not stored with the answer of key ${claim.key}: ` +
                `with it and the field middleware outputs the answer is over maxResponseBytes ` +
                `(${route.maxResponseBytes} bytes); ${parentDataReplayed(within)}`,
            );
          }
          if (overNow() <= 0) for (const line of said) tools.logger.warn(line);
          // Too large to store whole: stored without them (a replay answers those fields an
          // error), never past the route's limit.
          if (completed.body.length > route.maxResponseBytes) {
            tools.logger.warn(
              `the field middleware outputs of key ${claim.key} are not stored: with them ` +
                `the answer is over maxResponseBytes (${route.maxResponseBytes} bytes)`,
            );
            completed = encodeAnswer({ kind: 'data', data: wire, parentGraph, outputsLost: true });
          }
          const written = (await store.completeAnswer?.(claim, completed)) ?? false;
          if (written) tools.remember(claim, fingerprint, completed, store, 0);
          done(written ? completed : undefined);
        } catch (error) {
          tools.logger.warn(
            `the field middleware outputs of key ${claim.key} were not stored: ${String(error)}`,
          );
          done(undefined);
        }
      };
      // Its key noted too: a replay of it in this operation answers its middleware's results.
      awaitOutputs(answerPlace.context, answerPlace.path, completing, idOf(claim));
    }
    // Stored: the first answer is the resolver's own value (its Dates, its class instances,
    // which the fields' resolvers may read); the replays give its stored form back.
    return stored === answer ? first : answerOf(stored, graphql, types, tools.logger);
  };

  return new Observable<unknown>((subscriber) => {
    let value: unknown;
    /** Whether the resolver settled (completed or failed). */
    let settled = false;
    /** Answered from outside while the resolver goes on: it commits its own answer later. */
    let detached = false;
    /** Detached: tells a run beside this one that the resolver's work is settled. */
    let detachedDone: (() => void) | undefined;
    const detach = () => {
      detached = true;
      answerPlace = undefined;
      if (place) place.run.detachedSettled = new Promise<void>((done) => (detachedDone = done));
    };
    /** The resolver's answer being stored (or its work rolled back), once it settled. */
    let settling: Promise<unknown> | undefined;
    const end = (outcome: Outcome) => {
      settled = true;
      settling = settle(outcome);
      void settling.then(
        () => detachedDone?.(),
        () => detachedDone?.(),
      );
      settling.then(
        (result) => {
          subscriber.next(result);
          subscriber.complete();
        },
        (error: unknown) => {
          // Detached, the resolver's error was stored or its key given back: nobody waits.
          if (!detached) subscriber.error(error);
        },
      );
    };
    /** A value put in the resolver's place while its Promise goes on (see `next`). */
    let substituted = false;
    const inner = runInContext(context, next).subscribe({
      next: (emitted) => {
        if (substituted) return subscriber.next(emitted);
        // A value while the resolver's own Promise has not resolved is not its answer: an
        // interceptor inside `@Idempotent()` put it in its place (a `timeout()` with a
        // fallback). As for a timeout there: it is the field's answer, not stored, and the
        // resolver commits with its own answer when it settles.
        const goingOn = detached ? undefined : outcomeStillToCome(context, { value: emitted });
        if (!goingOn) {
          value = emitted;
          return;
        }
        substituted = true;
        detach();
        subscriber.next(emitted);
        void goingOn.then((outcome) => {
          settled = true;
          return settle(outcome)
            .catch(() => undefined)
            .then(() => detachedDone?.());
        });
      },
      error: (error: unknown) => {
        if (substituted) return subscriber.error(error);
        // A timeout of an interceptor inside `@Idempotent()` while the resolver's Promise goes
        // on: as under an outer timeout, the timeout is the field's error, not stored, and the
        // resolver commits with its own answer when it settles (see `isTimeoutError`).
        const goingOn = outcomeStillToCome(context, { error });
        if (!goingOn) return end({ error });
        detach();
        subscriber.error(error);
        void goingOn.then((outcome) => {
          settled = true;
          return settle(outcome)
            .catch(() => undefined)
            .then(() => detachedDone?.());
        });
      },
      complete: () => (substituted ? subscriber.complete() : end({ value })),
    });
    // Unsubscribed before the resolver settled: an outer layer answered (a global timeout()
    // interceptor), and its answer is not the resolver's, so it is not stored.
    return () => {
      // Settled, its answer still being stored (a lazy relation loaded, then the commit): a
      // run beside this one claims once it is stored, and replays it, never meets it held.
      if (settled && !detached && settling && place) {
        place.run.detachedSettled = settling.then(
          () => undefined,
          () => undefined,
        );
      }
      if (settled || detached) return;
      if (context.handlerStarted) {
        detach();
        // The resolver goes on in its transaction: it commits with its own answer when it
        // settles (or rolls back, as on any failure), so the retries replay that answer and
        // its work is done once. The subscription is kept: its end is the commit.
        return;
      }
      // Never started: the key is given back, and the resolver must not start late.
      detached = true;
      stopHeartbeat?.();
      context.abandoned = true;
      inner.unsubscribe();
      const givenBack = rollBackAndRelease(tools, context, 'before_handler', true);
      // A run beside this one claims once the key is given back, not while it is still held.
      if (place) place.run.detachedSettled = givenBack.catch(() => undefined);
    };
  });
}

/**
 * What a failure of the field means (see `classifyHandlerError`): before the resolver started,
 * or for a passing reason, the key is given back and the error goes out; the resolver's own
 * error is its final answer, stored without its effects. Always throws.
 */
async function failed(
  tools: OwnerTools,
  context: IdempotencyContext,
  fingerprint: Buffer,
  error: unknown,
  graphql: GraphqlModule,
  place: FieldPlace | undefined,
): Promise<never> {
  const transaction = context.transaction!;
  if (!context.handlerStarted) {
    // Failed in a guard, pipe or interceptor: nothing ran, so the key is given back.
    await rollBackAndRelease(tools, context, 'before_handler', true);
    throw error instanceof IdempotencyError ? problemThrown(error, graphql) : error;
  }
  // `isCancelled`: an async resolver's Observable the timeout cancelled, waited for detached
  // (`handlerOutcome`); its marker is no error of the resolver's, to be stored as final.
  if (isTimeoutError(error) || isCancelled(error)) {
    // Not done in time, and nothing going on to wait for (an Observable the timeout cancelled,
    // or the timeout the resolver threw itself): never a stored answer; the key given back.
    await rollBackAndRelease(tools, context, 'timeout');
    throw error;
  }
  // A resolver that caught a deadlock and went on fails next with "transaction aborted":
  // what the request met is the deadlock.
  const cause = transaction.causeOf(error);
  const failure = classifyHandlerError(cause);
  if (failure.kind !== 'final') {
    await transaction.rollback();
    if (failure.kind === 'retry') {
      await releaseQuietly(tools, context, false);
      publish('released', () => ({ ...eventOf(context), reason: failure.error.code }));
    } else {
      publish('leaseLost', () => eventOf(context));
    }
    throw problemThrown(failure.error, graphql);
  }
  let answer: StoredResponse;
  let firstError: FieldError;
  try {
    // A thrown value that is no Error (a provider's JSON body, a string) as GraphQL writes it
    // (`Unexpected error value: …`), so that its replay is the first answer.
    const thrown =
      error instanceof Error
        ? error
        : (graphql.locatedError(error, undefined).originalError ?? error);
    firstError = fieldError(thrown);
    answer = encodeAnswer({ kind: 'error', error: firstError });
  } catch {
    // An error of the resolver's that cannot be written (a getter of its extensions that
    // throws): never stored, nor left holding its transaction and key; its retry runs again.
    await rollBackAndRelease(tools, context, 'answer_unwritable');
    throw error;
  }
  const store = async (answered?: readonly ErrorLocation[]): Promise<Error | undefined> => {
    // A `GraphQLError` located by its own `nodes` is stored where the answer located it (under
    // Mercurius' `jit` at the field: see `answeredLocations`), for its replay to be the answer.
    const sent =
      answered && firstError.locations
        ? encodeAnswer({ kind: 'error', error: { ...firstError, locations: [...answered] } })
        : answer;
    const stored = await commitAnswer(tools, context, fingerprint, sent, true);
    if (stored === sent) return undefined;
    return answerOf(stored, graphql, undefined).then(
      () => new Error('the error was not stored'),
      (replaced: unknown) => replaced as Error,
    );
  };
  // Stored as the operation's answer goes out (see stored-at-answer.ts), its effects rolled
  // back now (the connection is free for the operation's next fields): until then, an app's
  // retry of the field takes the key over, and the error is never stored.
  const waiting =
    place &&
    storeAtAnswer(
      place.context,
      {
        path: place.path,
        message: messageOf(error),
        id: idOf(context.claim!),
        http: errorHttp(error),
      },
      store,
      storeWaitMs(context.claim!.leaseMs),
    );
  if (waiting && place) {
    place.run.takeClaim = () => {
      place.run.takeClaim = undefined;
      return waiting.cancel() ? context.claim : undefined;
    };
    await transaction.rollback();
    throw error;
  }
  const stored = await commitAnswer(tools, context, fingerprint, answer, true);
  // Stored: the first answer is the error itself, so the app's filters see its own class.
  if (stored === answer) throw error;
  return answerOf(stored, graphql, undefined) as Promise<never>;
}

/**
 * A stored answer as the resolver's result: its value (each scalar through its `parseValue()`,
 * so that GraphQL writes the bytes of the first answer again), or its error thrown.
 */
export async function answerOf(
  stored: StoredResponse,
  graphql: GraphqlModule,
  types: FieldTypes | undefined,
  logger?: Logger,
): Promise<unknown> {
  const answer = decodeAnswer(stored);
  if (!answer) {
    // The key was first used on an HTTP route (its fingerprint cannot match a field's).
    const reason = 'it is not the answer of a GraphQL field';
    throw problemThrown(new IdempotencyStoredResponseUnreadableError(reason), graphql);
  }
  if (answer.kind === 'data') {
    return types
      ? fromWire(
          graphql,
          types.schema,
          types.returnType,
          answer.data,
          answer.format,
          // The retry's own selection: what it reads of the stored answer.
          selectionOf(types.call.info),
          logger && ((message) => warnOnce(logger, message)),
          // Its parents' data, one graph read once for the whole replay (parent-graph.ts).
          namedReader(answer.parentGraph),
          // Its place in the retry's answer: one object at several places answers each its
          // own read (read-places.ts).
          placeOfPath(pathOf(types.call.info)),
        )
      : answer.data;
  }
  throw thrownError(answer.error, graphql);
}

/** The library's error as the GraphQL error the field answers with. */
export function problemThrown(error: IdempotencyError, graphql: GraphqlModule): Error {
  return thrownError(problemError(error), graphql);
}

/**
 * What `parentDataWithin` left out, as the log says it: the parents' hidden members (first,
 * hidden-within.ts), then whole parents' data.
 */
function parentDataLeftOut(within: { dropped: number; hiddenDropped: number }): string {
  const hidden =
    within.hiddenDropped > 0
      ? `${within.hiddenDropped} member(s) of parents' own data that are not enumerable ` +
        '(kept out of JSON, named by no field)'
      : '';
  const whole =
    within.dropped > 0
      ? `the own data of ${within.dropped} parent(s) (read by @ResolveField() resolvers, ` +
        'beyond the selection)'
      : '';
  return hidden && whole ? `${hidden}, then ${whole},` : hidden || whole;
}

/** What a replay's resolvers read where `parentDataWithin` left data out. */
function parentDataReplayed(within: { dropped: number; hiddenDropped: number }): string {
  const hidden =
    within.hiddenDropped > 0 ? "a replay's resolver reads undefined for such a member" : '';
  const whole =
    within.dropped > 0 ? "a replay's resolver reads those parents as the answer holds them" : '';
  return hidden && whole ? `${hidden}, and ${whole}` : hidden || whole;
}
