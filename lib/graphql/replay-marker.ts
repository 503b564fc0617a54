import { Injectable, type OnApplicationBootstrap, SetMetadata } from '@nestjs/common';
import { HttpAdapterHost } from '@nestjs/core';
import { type GraphQLSchema } from 'graphql';
import { loadGraphql } from './graphql-module.js';
import { locatedAsFirst, ownLocatedOf } from './jit-located.js';
import { answerOutputsOf } from './middleware-outputs.js';
import { answerPlacedReadsOf } from './placed-reads.js';
import { repeatedCopies } from './repeated-errors.js';
import { noteOwnResolvers } from './resolver-kind.js';
import { answerHookOn, storeAnswersOf, withStoreFailures } from './stored-at-answer.js';
import { type AnsweredError, storeOutputsOf } from './output-paths.js';

/**
 * Where an operation's replayed fields are noted: on its GraphQL context, the one object
 * every resolver of the operation is given, and the drivers' hooks see at the end.
 */
const REPLAYED = Symbol('idempotency.replayed');

/** What a replay adds to the answer's `extensions`, under `idempotency`. */
export interface ReplayExtension {
  /**
   * The fields of the operation answered from their stored answer, by their name in the
   * answer (their alias, when they have one), in the order they were answered.
   */
  replayed: string[];
}

/** Notes that the field `responseKey` of the operation whose context is `context` is a replay. */
export function markReplayed(context: unknown, responseKey: string): void {
  if (typeof context !== 'object' || context === null) return;
  const marked = context as { [REPLAYED]?: string[] };
  const replayed = (marked[REPLAYED] ??= []);
  // Once per field: an app's retry of a replayed field replays it again, for the same answer.
  if (!replayed.includes(responseKey)) replayed.push(responseKey);
}

/**
 * The answer's `extensions` with the replay marker added, or undefined when no field of the
 * operation was replayed: the drivers' hooks below call it.
 *
 * @example { idempotency: { replayed: ['createTransfer', 'b'] } }
 */
export function withReplayMarker(
  context: unknown,
  extensions: Record<string, unknown> | undefined,
): Record<string, unknown> | undefined {
  const replayed = (context as { [REPLAYED]?: string[] } | null)?.[REPLAYED];
  if (!replayed?.length) return undefined;
  const marker: ReplayExtension = { replayed: [...replayed] };
  return { ...extensions, idempotency: marker };
}

/** How many operations share an HTTP head (more than one in a batch). */
const operationsOf = new WeakMap<object, number>();

/** The metadata key of `@nestjs/apollo`'s `@Plugin()` (read by name: nothing of it is imported). */
const APOLLO_PLUGIN = 'graphql:plugin';

interface ApolloResponse {
  contextValue: unknown;
  /** graphql-js's errors of the operation, before the app's `formatError`. */
  errors?: readonly AnsweredError[];
  response: {
    http?: { status?: number; headers?: Map<string, string> };
    body: {
      kind: string;
      singleResult?: {
        data?: unknown;
        extensions?: Record<string, unknown>;
        errors?: readonly { message: string; path?: readonly (string | number)[] }[];
      };
    };
  };
}

/**
 * Writes the replay marker into the answers of Apollo (`@nestjs/apollo` finds the providers
 * marked `@Plugin()` and gives them to Apollo Server; a `GraphQLModule` whose `include` leaves
 * this module out will not find it) and of Mercurius (an `onResolution` hook, added once the
 * app has started, as `@nestjs/mercurius` registers Mercurius while it starts).
 */
@Injectable()
@SetMetadata(APOLLO_PLUGIN, true)
export class GraphqlReplayMarker implements OnApplicationBootstrap {
  constructor(private readonly adapterHost: HttpAdapterHost) {}

  /**
   * Apollo Server starting: each field's own resolver noted before Apollo wraps it (see
   * `noteOwnResolvers`), so that a field behind the global field middleware is told.
   */
  serverWillStart({ schema }: { schema?: { getTypeMap(): Record<string, unknown> } } = {}) {
    noteOwnResolvers(schema);
    return Promise.resolve();
  }

  /**
   * Apollo Server's plugin hooks. The answer also waits for its fields' errors to be stored
   * (see stored-at-answer.ts): Apollo's own retry of a field is then possible.
   */
  requestDidStart({
    contextValue,
    response,
  }: { contextValue?: unknown; response?: { http?: object } } = {}) {
    answerHookOn(contextValue);
    // The operations of a batch share one HTTP head: counted, so that one operation's
    // unstored error never takes back a header another operation's stored error set.
    if (response?.http) operationsOf.set(response.http, (operationsOf.get(response.http) ?? 0) + 1);
    return Promise.resolve({
      willSendResponse: async ({ contextValue: context, response, errors }: ApolloResponse) => {
        const result = response.body.kind === 'single' ? response.body.singleResult : undefined;
        // Each error stored at its own locations: Apollo runs graphql-js, which answered
        // them, and its `result.errors` are after the app's `formatError`, which a replay goes
        // through again (adversary 75c: a formatter re-basing lines applied twice).
        // The outputs of field middleware on a mutation's first answer, as the answer holds
        // them (see middleware-outputs.ts).
        // Its errors before the app's `formatError` (a replay goes through it again).
        await storeOutputsOf(context, result?.data, errors ?? []);
        // A middleware field's copy of an error the replay answers itself: once (the raw
        // errors and Apollo's formatted ones are one for one, in order).
        const drop = repeatedCopies(errors ?? []);
        if (result?.errors && drop.size > 0 && result.errors.length === errors?.length) {
          result.errors = result.errors.filter((_, i) => !drop.has(i));
        }
        const failures = await storeAnswersOf(context);
        if (result && failures.length > 0) {
          // Apollo has formatted its errors by now: the entry is the error's JSON.
          result.errors = withStoreFailures(result.errors, failures, (json) => json);
          // And merged each error's `extensions.http` into the answer: an error not stored
          // takes back its status and headers (a `Retry-After` it never meant).
          const alone = response.http !== undefined && operationsOf.get(response.http) === 1;
          for (const { http } of alone ? failures : []) {
            for (const name of http?.headers?.keys() ?? []) response.http?.headers?.delete(name);
            if (http?.status !== undefined && response.http?.status === http.status) {
              response.http.status = undefined;
            }
          }
        }
        const extensions = result && withReplayMarker(context, result.extensions);
        if (result && extensions) result.extensions = extensions;
      },
    });
  }

  onApplicationBootstrap(): void {
    const instance = this.adapterHost?.httpAdapter?.getInstance?.() as
      { graphql?: { addHook?: MercuriusAddHook } } | undefined;
    instance?.graphql?.addHook?.('preExecution', async (schema, _document, context) => {
      answerHookOn(context);
      // The middleware fields' wrappers on before Mercurius' `jit` compiles the document: a
      // compiled document keeps the resolvers the schema had then, so wrappers put on later
      // (at the first keyed field) would never run for it (adversary 79).
      const graphql = await loadGraphql();
      // Each place's own read of one object at several places (placed-reads.ts), under them.
      answerPlacedReadsOf(graphql, schema as GraphQLSchema);
      answerOutputsOf(graphql, schema as GraphQLSchema);
    });
    instance?.graphql?.addHook?.('onResolution', async (execution, context) => {
      // Under `jit`, a replay's error where the first answer located it (see jit-located.ts).
      const located = locatedAsFirst(
        execution.errors,
        ownLocatedOf(context),
        (entry, locations, path) => {
          const json = {
            ...((entry.toJSON?.() as object | undefined) ?? entry),
            locations,
            ...(path ? { path: [...path] } : {}),
          };
          return { ...json, toJSON: () => json } as MercuriusError;
        },
      );
      if (located) execution.errors = located;
      // The outputs of field middleware on a mutation's first answer (middleware-outputs.ts).
      await storeOutputsOf(context, execution.data, execution.errors ?? []);
      // A middleware field's copy of an error the replay answers itself: once.
      const drop = repeatedCopies(execution.errors ?? []);
      if (drop.size > 0) execution.errors = execution.errors?.filter((_, i) => !drop.has(i));
      // Each error stored where the answer located it: graphql-jit's at the field.
      const failures = await storeAnswersOf(context, execution.errors);
      if (failures.length > 0) {
        // Mercurius formats its errors next, each by its `toJSON()`.
        execution.errors = withStoreFailures(execution.errors, failures, (json) => ({
          ...json,
          toJSON: () => json,
        }));
      }
      const extensions = withReplayMarker(context, execution.extensions);
      if (extensions) execution.extensions = extensions;
    });
  }
}

interface MercuriusError {
  message: string;
  path?: readonly (string | number)[];
  locations?: unknown;
  toJSON?(): unknown;
}

interface MercuriusExecution {
  data?: unknown;
  extensions?: Record<string, unknown>;
  errors?: readonly MercuriusError[];
}

/** Mercurius' `addHook`, for its `preExecution` and `onResolution` hooks. */
interface MercuriusAddHook {
  (
    name: 'preExecution',
    hook: (schema: unknown, document: unknown, context: unknown) => Promise<void>,
  ): void;
  (
    name: 'onResolution',
    hook: (execution: MercuriusExecution, context: unknown) => Promise<void>,
  ): void;
}
