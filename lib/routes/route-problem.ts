import { RequestMethod } from '@nestjs/common';
import { type ResolverKind, resolverProblem } from '../graphql/resolver-placement.js';
import { type RouteClaimStore } from '../claim/route-claim-store.js';

export { type RouteClaimStore } from '../claim/route-claim-store.js';

/** What the start-up check reads of a method that carries `@Idempotent()`. */
export interface DecoratedMethod {
  /** `Class.method`, for the message. */
  name: string;
  /** Whether its class is a controller (not a provider or a gateway). */
  inController: boolean;
  /** Its HTTP method, when it is a route handler. */
  httpMethod?: RequestMethod;
  /** Whether the library's interceptor is on it or on its class. */
  intercepted: boolean;
  /** Whether it is a `@MessagePattern()` / `@EventPattern()` handler. */
  messageHandler: boolean;
  /** Whether it is a WebSocket gateway's `@SubscribeMessage()` handler. */
  gatewayHandler: boolean;
  /** What it is to GraphQL, when it is a resolver's query, mutation, subscription or field. */
  resolver?: ResolverKind;
  /** The argument its key is read from (`keyFrom: { arg }`), which only a mutation has. */
  keyArg?: string;
  /** Its claim store and whether it can serve the route (left out: not checked). */
  claimStore?: RouteClaimStore;
}

const SAFE_METHODS = new Map<RequestMethod, string>([
  [RequestMethod.GET, 'GET'],
  [RequestMethod.HEAD, 'HEAD'],
  [RequestMethod.OPTIONS, 'OPTIONS'],
]);

/**
 * Why `@Idempotent()` cannot work where it was put, or undefined when it can. Pure: the
 * module's start-up check feeds it every decorated method and fails on the first answer, so
 * that a route the library would silently pass through is found before the first request.
 */
export function routeProblem(method: DecoratedMethod): string | undefined {
  const where = `@Idempotent() on ${method.name}`;
  if (method.messageHandler) {
    return (
      `${where}: a message handler (@MessagePattern/@EventPattern) has no HTTP request or ` +
      'Idempotency-Key header; use @IdempotentMessage(), which applies it once per message id'
    );
  }
  if (method.gatewayHandler) {
    return `${where}: WebSocket gateway handlers are not supported; use an HTTP route`;
  }
  if (method.resolver) {
    const misplaced = resolverProblem(where, method.resolver);
    if (misplaced) return misplaced;
    if (!method.intercepted) return notIntercepted(where);
    if (method.claimStore?.oneCommit) {
      return (
        `${where}: oneCommit is for HTTP routes so far, and a GraphQL mutation's claim ` +
        'commits alone first; set oneCommit: false on it'
      );
    }
    return method.claimStore && claimStoreProblem(where, method.claimStore);
  }
  if (method.keyArg !== undefined) {
    return (
      `${where}: keyFrom: { arg: '${method.keyArg}' } reads a GraphQL mutation's argument, ` +
      'and a route has none; on a route use { body }, { header } or { name, read }'
    );
  }
  if (!method.inController) {
    return (
      `${where}: not a controller, so no request passes through the interceptor and the ` +
      'method would run with no key at all; put it on the route handler that calls it'
    );
  }
  if (method.httpMethod === undefined) {
    return `${where}: not a route handler (no @Post(), @Put(), @Patch() or @Delete() on it)`;
  }
  const safe = SAFE_METHODS.get(method.httpMethod);
  if (safe) {
    return (
      `${where}: ${safe} is safe by HTTP's definition and must not change state; keys are ` +
      'for POST, PUT, PATCH and DELETE'
    );
  }
  if (!method.intercepted) return notIntercepted(where);
  return method.claimStore && claimStoreProblem(where, method.claimStore);
}

function notIntercepted(where: string): string {
  return (
    `${where}: the IdempotencyInterceptor is not on it (its metadata was set without the ` +
    'decorator?), so requests would pass through unchecked; use @Idempotent() itself'
  );
}

/** Why a route cannot use its claim store, or undefined when it can. */
export function claimStoreProblem(where: string, store: RouteClaimStore): string | undefined {
  if (store.transactional === undefined) {
    return (
      `${where}: no claim store is named "${store.name}"; the module has ` +
      `${store.known.map((name) => `"${name}"`).join(', ')} (add it to claimStores)`
    );
  }
  if (store.oneCommit && !store.transactional) {
    return (
      `${where}: oneCommit commits the claim with the handler's work in the app's ` +
      `PostgreSQL, and claim store "${store.name}" is not there; use claimStore: "postgres" ` +
      'or set oneCommit: false'
    );
  }
  if (store.oneCommit && !store.atomic) {
    return (
      `${where}: oneCommit commits the claim with the handler's work, and a route that is ` +
      'not atomic commits its work apart; set oneCommit: false, or make the route atomic'
    );
  }
  if (store.atomic && !store.transactional) {
    return (
      `${where}: claim store "${store.name}" is not in the app's database, so the handler's ` +
      'effects cannot commit with its stored response (atomic, the default); set atomic: ' +
      'false on the route to accept that a failure between them runs the handler again, or ' +
      'use claimStore: "postgres"'
    );
  }
  return undefined;
}

/** Why `@IdempotentMessage()` cannot work where it was put, or undefined when it can. */
export function messageHandlerProblem(method: DecoratedMethod): string | undefined {
  if (method.messageHandler && method.inController) return undefined;
  return (
    `@IdempotentMessage() on ${method.name}: not a @MessagePattern/@EventPattern handler of a ` +
    'controller, so no message passes through it; on an HTTP route use @Idempotent()'
  );
}

/** A mutation's argument as its schema has it (see `keyArgProblem`). */
export interface SchemaArgument {
  name: string;
  defaultValue?: unknown;
}

/**
 * Why a mutation's key argument (`keyFrom: { arg }`) cannot key it, by the built schema's
 * arguments (whatever declared them: `@Args()`, an `@ArgsType()` class, a schema file): one
 * it does not have (a typo, a renamed argument, a class's `keyFrom` over a mutation added
 * later) would never be sent, every call unkeyed or refused for a key no client can give
 * (adversaries 69, 70); one with a default would key every call that sends none with that
 * default, one key for them all (adversary 71). Undefined where it can.
 */
export function keyArgProblem(
  where: string,
  keyArg: string,
  args: readonly SchemaArgument[],
): string | undefined {
  const arg = args.find((candidate) => candidate.name === keyArg);
  if (!arg) {
    const declared = args.length > 0 ? args.map((candidate) => candidate.name).join(', ') : 'none';
    return (
      `@Idempotent() on ${where}: keyFrom: { arg: '${keyArg}' } names no argument of the ` +
      `mutation in the schema (its arguments: ${declared}); declare it (@Args('${keyArg}'), a ` +
      'field of its @ArgsType() class, or the schema file) or name one it has'
    );
  }
  if (arg.defaultValue !== undefined) {
    return (
      `@Idempotent() on ${where}: keyFrom: { arg: '${keyArg}' } has a default value in the ` +
      `schema (${JSON.stringify(arg.defaultValue)}): every call that sends no key would be keyed ` +
      'by it, one key for all of them; remove the default'
    );
  }
  return undefined;
}
