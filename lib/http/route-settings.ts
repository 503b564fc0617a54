import { type ExecutionContext } from '@nestjs/common';
import { type Reflector } from '@nestjs/core';
import {
  HEADERS_METADATA,
  HTTP_CODE_METADATA,
  RESPONSE_PASSTHROUGH_METADATA,
  ROUTE_ARGS_METADATA,
} from '@nestjs/common/constants.js';
import { RouteParamtypes } from '@nestjs/common/enums/route-paramtypes.enum.js';
import { IDEMPOTENT_ROUTE_OPTIONS } from '../shapes/idempotency.constants.js';
import {
  type IdempotencyRouteOptions,
  type ResolvedIdempotencyOptions,
  type ResolvedRouteOptions,
} from '../shapes/idempotency-options.interface.js';
import { InvalidIdempotencyOptionsError, resolveRouteOptions } from '../idempotency-options.js';
import { type ClaimStore } from '../shapes/claim-store.interface.js';
import { type ClaimStores } from '../claim-stores.js';
import { claimStoreProblem } from '../routes/route-problem.js';

/** What the interceptor needs of a route, read from its metadata once. */
export interface RouteSettings {
  route: ResolvedRouteOptions;
  /** The route's claim store. */
  store: ClaimStore;
  httpCode: number | undefined;
  /** `@Res()` or `@Next()` without passthrough: Nest leaves the response to the handler. */
  responseHandled: boolean;
  /** `@Res()` or `@Next()`, passthrough or not: the handler may set the status and headers. */
  takesResponse: boolean;
  /** The route's `@Header()`s that a stored response keeps (its type, its `Location`). */
  headers: Record<string, string>;
  /** `Controller.handler`, as the events name the route. */
  name: string;
  /**
   * `@SerializeOptions()` on the route or its controller: Nest's `ClassSerializerInterceptor`
   * reshapes its answers, plain objects too (`type` turns a row into a class whose `@Exclude()`d
   * fields it drops), so an answer the library renders itself (a late one) would not be the app's.
   */
  serialized: boolean;
}

/** Nest's `CLASS_SERIALIZER_OPTIONS` (read by its name: not exported from the package's index). */
const CLASS_SERIALIZER_OPTIONS = 'class_serializer:options';

/** A route's settings from its metadata; the interceptor keeps them for the next requests. */
export function readRouteSettings(
  context: ExecutionContext,
  reflector: Reflector,
  options: ResolvedIdempotencyOptions,
  stores: ClaimStores,
): RouteSettings {
  const handler = context.getHandler();
  const own = reflector.get<IdempotencyRouteOptions | undefined>(IDEMPOTENT_ROUTE_OPTIONS, handler);
  const route = resolveRouteOptions(own ?? {}, options.route);
  const name = `${context.getClass().name}.${handler.name}`;
  // The start-up check refuses what this would; it only guards a route the check could not
  // see, with the check's own rule.
  const problem = claimStoreProblem(`@Idempotent() on ${name}`, stores.forRoute(route));
  if (problem) throw new InvalidIdempotencyOptionsError(problem);
  return {
    store: stores.get(route.claimStore)!,
    route,
    httpCode: reflector.get<number | undefined>(HTTP_CODE_METADATA, handler),
    responseHandled: writesOwnResponse(context.getClass(), handler.name),
    takesResponse: takesResponse(context.getClass(), handler.name),
    name,
    serialized:
      reflector.getAllAndOverride<unknown>(CLASS_SERIALIZER_OPTIONS, [
        handler,
        context.getClass(),
      ]) !== undefined,
    headers: declaredHeaders(
      route.storedHeaders,
      reflector.get<{ name: string; value: string }[] | undefined>(HEADERS_METADATA, handler),
    ),
  };
}

/** The status of a handler's answer when it sets none: `@HttpCode()`, else Nest's default. */
export function defaultStatusOf(httpCode: number | undefined, method: string): number {
  return httpCode ?? (method === 'POST' ? 201 : 200);
}

/** The route's `@Header()`s that its stored response keeps. */
export function declaredHeaders(
  kept: readonly string[],
  declared: { name: string; value: string }[] = [],
): Record<string, string> {
  const out: Record<string, string> = {};
  for (const { name, value } of declared) {
    if (kept.includes(name.toLowerCase())) out[name.toLowerCase()] = value;
  }
  return out;
}

/** Whether the handler takes the response (`@Res()`, `@Response()`, `@Next()`). */
export function takesResponse(controller: object, method: string): boolean {
  const args = (Reflect.getMetadata(ROUTE_ARGS_METADATA, controller, method) ?? {}) as object;
  return Object.keys(args).some((key) => {
    const type = Number(key.split(':')[0]);
    return type === RouteParamtypes.RESPONSE || type === RouteParamtypes.NEXT;
  });
}

/** Nest's own rule (RouterExecutionContext.isResponseHandled), read from the same metadata. */
export function writesOwnResponse(controller: object, method: string): boolean {
  return (
    takesResponse(controller, method) &&
    !Reflect.getMetadata(RESPONSE_PASSTHROUGH_METADATA, controller, method)
  );
}
