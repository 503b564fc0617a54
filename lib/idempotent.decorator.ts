import { isForeignThenable, startedHere } from './transaction/foreign-thenable.js';
import { applyDecorators, RequestMethod, SetMetadata, UseInterceptors } from '@nestjs/common';
import { isObservable, type Observable, tap } from 'rxjs';
import { METHOD_METADATA } from '@nestjs/common/constants.js';
import { IDEMPOTENT_ROUTE_OPTIONS } from './shapes/idempotency.constants.js';
import { IdempotencyHandlerRetriedInsideError } from './shapes/idempotency.errors.js';
import { declaredKind } from './graphql/resolver-placement.js';
import {
  currentIdempotencyContext,
  type IdempotencyContext,
} from './transaction/idempotency-context.js';
import { handlerTries, type HandlerTry } from './transaction/handler-try.js';
import { type IdempotencyRouteOptions } from './shapes/idempotency-options.interface.js';
import { resolveRouteOptions } from './idempotency-options.js';
import { IdempotencyInterceptor } from './idempotency.interceptor.js';
import { isOwnCall } from './own-handler-call.js';

/** The try of a wrapped method called where no request owns a key: nothing to track. */
const NO_TRY: HandlerTry = Object.freeze({ method: undefined, settled: true });

/**
 * Notes on `context` that the route's handler answered with an Observable, at once or once
 * its Promise resolves: before Nest subscribes to it (its reaction, registered first, runs
 * before the one Nest's chain registers later on the same Promise).
 */
function noteObservableAnswer(context: IdempotencyContext, result: unknown): void {
  if (isObservable(result)) {
    context.handlerAnsweredWithObservable = true;
    return;
  }
  // A native Promise only: another thenable's `then()` may do the work (a query builder's
  // runs its query), which Nest's own await then does again.
  if (!(result instanceof Promise)) return;
  result.then(
    (value) => {
      if (isObservable(value)) context.handlerAnsweredWithObservable = true;
    },
    // Its rejection is Nest's to handle (and a retry's): nothing to note.
    () => undefined,
  );
}

/**
 * What Nest gets of the handler's answer: an Observable (at once, or from its Promise) that
 * notes on `context` when it gives its first value or ends (`handlerObservableAnswered`), so that a
 * value an interceptor inside `@Idempotent()` gives in its place before it does is told apart
 * (adversary 48b: `timeout({ with })` over `HttpService` after a write). Anything else as it is.
 */
function watchedAnswer(context: IdempotencyContext, result: unknown): unknown {
  const answered = () => {
    context.handlerObservableAnswered = true;
  };
  const watched = (answer: Observable<unknown>) =>
    answer.pipe(tap({ next: answered, complete: answered, error: answered }));
  if (isObservable(result)) return watched(result);
  if (!(result instanceof Promise)) return result;
  return result.then((value: unknown) => (isObservable(value) ? watched(value) : value));
}

/**
 * Notes when a try's outcome settles: a native Promise once it does, unless it resolves to an
 * Observable; a plain value at once. An Observable answer never counts as settled: the work
 * behind it (a Promise inside `from()`) may outlive its subscription. Another thenable is not
 * known to settle either.
 */
function noteSettled(thisTry: HandlerTry, result: unknown): void {
  const settle = () => {
    thisTry.settled = true;
  };
  if (result instanceof Promise) {
    thisTry.pending = true;
    result.then(
      (value) => {
        thisTry.pending = false;
        if (!isObservable(value)) settle();
      },
      () => {
        thisTry.pending = false;
        settle();
      },
    );
  } else if (!isObservable(result) && !isForeignThenable(result)) {
    settle();
  }
}

/**
 * Marks the moment the handler itself starts, after guards, interceptors and pipes. Nest runs
 * interceptors before pipes, so without this mark a `ValidationPipe` 400 would look like the
 * handler's answer and be stored; with it, a request that fails before its handler runs gives
 * its key back and the client may fix the request and retry with the same key.
 *
 * The wrapper keeps the handler's name and every metadata a decorator put on it, so that
 * decorators listed above or below `@Idempotent()` see the same function either way.
 */
const markHandlerStart: MethodDecorator = (_target, _property, descriptor) => {
  const handler = descriptor.value as unknown as (...args: unknown[]) => unknown;
  const wrapped = function (this: unknown, ...args: unknown[]) {
    const context = currentIdempotencyContext();
    // The route's own handler only: one that calls a sibling route method of its controller
    // (`this.create()`, wrapped too) is still the one whose outcome the request waits for.
    // Each call of its own replaces the last: an interceptor inside `@Idempotent()` that
    // retries it (`retry()`, then `timeout()`) calls it again, and the attempt that runs is
    // the one a timeout leaves going on, not the first, which has failed already.
    const within = handlerTries.getStore();
    const own = isOwnCall({
      inRequest: context !== undefined,
      insideHandler: within !== undefined,
      answeredWithObservable: context?.handlerAnsweredWithObservable === true,
    });
    // Called again, from outside itself, by an interceptor inside `@Idempotent()` (a
    // `retry()` written above it; an Observable answer's retry, or a hedging `race()`, calls
    // it again too): refused while the try before it may still run (a `timeout()` gave up on
    // it; an Observable answer's work, a Promise inside `from()`, may outlive it) or once the
    // request's transaction holds its statements, which would commit with the next try's
    // answer. A try that failed before it sent any runs again; work of it still running (a
    // step its Promise did not wait for) is refused the request's transaction from now on.
    const lastTry = context?.lastTry;
    const again = lastTry?.method === handler && within === undefined;
    if (context && again && (!lastTry.settled || context.transaction?.begun)) {
      throw new IdempotencyHandlerRetriedInsideError(context.route);
    }
    context?.startHandler();
    const thisTry: HandlerTry | undefined =
      own || again ? { method: handler, settled: false } : undefined;
    if (again) lastTry.superseded = true;
    if (context && thisTry) context.lastTry = thisTry;
    let result: unknown;
    try {
      const tryOf = thisTry ?? within ?? NO_TRY;
      result = handlerTries.run(tryOf, () => handler.apply(this, args));
    } catch (error) {
      if (thisTry) thisTry.settled = true;
      throw error;
    }
    // Another thenable than a native Promise (a query builder returned unawaited: Drizzle's,
    // Kysely's) runs its work in each `then()`: made a Promise here, once, so that Nest's await
    // and the library's wait for the outcome (an inner timeout) share one run of it.
    if (own && context && isForeignThenable(result)) result = startedHere(result);
    // Only what it returned: one that threw at once has no outcome still to come.
    if (own && context) {
      context.handlerReturned = { value: result };
      noteObservableAnswer(context, result);
    }
    if (thisTry) noteSettled(thisTry, result);
    return own && context ? watchedAnswer(context, result) : result;
  };
  Object.defineProperty(wrapped, 'name', { value: handler.name });
  for (const key of Reflect.getOwnMetadataKeys(handler)) {
    Reflect.defineMetadata(key, Reflect.getOwnMetadata(key, handler), wrapped);
  }
  (descriptor as PropertyDescriptor).value = wrapped;
  return descriptor;
};

/**
 * The methods of a class, its own and the ones it inherits (the nearest of each name), as
 * property descriptors: what Nest serves of it.
 */
function classMethodDescriptors(prototype: object): Map<string, PropertyDescriptor> {
  const methods = new Map<string, PropertyDescriptor>();
  for (
    let at = prototype;
    at && at !== Object.prototype;
    at = Object.getPrototypeOf(at) as object
  ) {
    for (const name of Object.getOwnPropertyNames(at)) {
      if (name === 'constructor' || methods.has(name)) continue;
      const method = Object.getOwnPropertyDescriptor(at, name);
      if (typeof method?.value === 'function') methods.set(name, method);
    }
  }
  return methods;
}

/** The methods a class-level `@Idempotent()` covers: the ones that change state. */
const UNSAFE_METHODS: ReadonlySet<RequestMethod> = new Set([
  RequestMethod.POST,
  RequestMethod.PATCH,
  RequestMethod.DELETE,
]);

/**
 * Makes a route idempotent: the first request with a key runs the handler and its response
 * is stored; a retry with the same key and request gets that response again, byte for byte,
 * without running anything. Options override the module's for this route.
 *
 * On a controller class, it makes every `POST`, `PATCH` and `DELETE` route of the class
 * idempotent, the ones it inherits too (a base class of its own is left as it was); a
 * method's own `@Idempotent()` options then override the class's. On a GraphQL resolver
 * class, every `@Mutation()` it serves, its abstract base class's too.
 *
 * @example
 * @Post('charges')
 * @Idempotent()
 * create(@Body() dto: CreateChargeDto) { ... }
 */
export function Idempotent(
  options: IdempotencyRouteOptions = {},
): ClassDecorator & MethodDecorator {
  // Validated now, so that a wrong option fails at start-up rather than on the first request.
  resolveRouteOptions(options);
  const onMethod = (own: IdempotencyRouteOptions): MethodDecorator =>
    applyDecorators(
      markHandlerStart,
      SetMetadata(IDEMPOTENT_ROUTE_OPTIONS, own),
      UseInterceptors(IdempotencyInterceptor),
    );
  return ((target: object, property?: string | symbol, descriptor?: PropertyDescriptor) => {
    if (descriptor) return onMethod(options)(target, property!, descriptor);
    const prototype = (target as { prototype: object }).prototype;
    for (const [name, found] of classMethodDescriptors(prototype)) {
      // An inherited method (Nest's resolver and controller inheritance: an abstract base
      // class's `@Mutation()`) is covered on this class, its base left as it was: this class
      // gets its own, wrapped copy, with the base's metadata.
      const method = { ...found };
      const handler = method.value as object;
      const unsafe =
        UNSAFE_METHODS.has(Reflect.getMetadata(METHOD_METADATA, handler) as RequestMethod) ||
        declaredKind(handler) === 'mutation';
      if (!unsafe) continue;
      const own = Reflect.getMetadata(IDEMPOTENT_ROUTE_OPTIONS, handler) as
        IdempotencyRouteOptions | undefined;
      if (own) {
        // Decorated on its own too (method decorators run first): its options win. One it
        // inherits keeps its own as they are (its base class's, which other classes share).
        if (Object.hasOwn(prototype, name)) {
          Reflect.defineMetadata(IDEMPOTENT_ROUTE_OPTIONS, { ...options, ...own }, handler);
        }
        continue;
      }
      onMethod(options)(prototype, name, method);
      Object.defineProperty(prototype, name, method);
    }
  }) as ClassDecorator & MethodDecorator;
}
