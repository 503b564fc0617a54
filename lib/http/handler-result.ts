import { isObservable } from 'rxjs';
import { StreamableFile } from '@nestjs/common';
import { Readable } from 'node:stream';
import { type StoredResponse } from '../shapes/stored-response.js';
import { isTimeoutError } from '../transaction/failure.js';
import { type IdempotencyContext } from '../transaction/idempotency-context.js';

const JSON_TYPE = 'application/json; charset=utf-8';

/**
 * The response the HTTP adapter would have written for a handler's return value, for the one
 * case where none writes it: an outer interceptor (a global timeout, say) answered first, the
 * handler went on, and its own answer is what the retries must receive. It follows Nest's
 * adapters: Express sends objects with `res.json()` and anything else as `String(value)`
 * (HTML, as `res.send()` types strings); Fastify sends strings as plain text and other values
 * as JSON. A `Content-Type` set with `@Header()` wins, as it does on the adapters.
 */
export function renderResult(
  value: unknown,
  status: number,
  headers: Readonly<Record<string, string>>,
  adapter: string,
): StoredResponse {
  const out: Record<string, string> = { ...headers };
  if (value === undefined || value === null) return { status, headers: out, body: Buffer.alloc(0) };
  const [body, type] = serialize(value, adapter);
  out['content-type'] ??= type;
  return { status, headers: out, body: Buffer.from(body) };
}

function serialize(value: unknown, adapter: string): [string, string] {
  if (adapter === 'fastify') {
    return typeof value === 'string'
      ? [value, 'text/plain; charset=utf-8']
      : [JSON.stringify(value), JSON_TYPE];
  }
  return typeof value === 'object'
    ? [JSON.stringify(value), JSON_TYPE]
    : [String(value), 'text/html; charset=utf-8'];
}

/**
 * The stream a handler's return value is sent from, if it is one: a `StreamableFile`'s, or a
 * Node stream (which Fastify pipes as it is). The adapter copies it into the held response
 * chunk by chunk; when it fails midway, the adapter answers with what it was given so far
 * plus an error of its own, which is not an answer to store.
 */
export function resultStream(value: unknown): Readable | undefined {
  if (value instanceof StreamableFile) return value.getStream();
  return value instanceof Readable ? value : undefined;
}

/**
 * Calls `onError` once if `stream` fails, now or later. A stream that failed before it was
 * watched (while an interceptor awaited) has already emitted its `error`, but keeps it.
 */
export function onStreamError(stream: Readable, onError: (error: unknown) => void): void {
  if (stream.errored) {
    onError(stream.errored);
    return;
  }
  // `on`, not `once`: a second error with no listener left would bring the process down.
  let called = false;
  stream.on('error', (error) => {
    if (called) return;
    called = true;
    onError(error);
  });
}

/** What is known of a handler's answer when the adapter has written it. */
export interface WrittenAnswer {
  /** The status written. */
  status: number;
  /** Whether the handler returned (emitted) a value other than undefined. */
  returned: boolean;
  /** The route's `@HttpCode()`, if any. */
  httpCode?: number;
  /** The raw response's status when the handler returned (one it set with `@Res()`). */
  statusWhenReturned?: number;
  /** Whether writing the value threw (`res.json()`, `reply.send()`: `JSON.stringify` refused it). */
  writeThrew?: boolean;
}

/**
 * Whether a 5xx was written in place of the value the handler returned: the adapter could not
 * write it (a Prisma row's `BigInt` id, a cycle, which `JSON.stringify` throws on), and Nest's
 * exception handler answered 500 after the handler had succeeded. That answer is a bug's, as
 * if the handler had thrown: its effects roll back, rather than commit with a stored 500 that
 * tells every retry the request failed. A 5xx the handler chose (`@HttpCode(503)`, or a status
 * it set on `@Res({ passthrough: true })`) is its answer. Where writing it is seen to throw
 * (Express's `res.json()`, Fastify's `reply.send()`: `watchJsonWrite`), whatever status an exception filter of the app's
 * then wrote is no answer to the value either.
 */
export function isUnwrittenValue(answer: WrittenAnswer): boolean {
  if (!answer.returned) return false;
  // Whatever an exception filter of the app's then answered (`200 { success: false }`).
  if (answer.writeThrew) return true;
  if (answer.status < 500) return false;
  return (answer.httpCode ?? 0) < 500 && (answer.statusWhenReturned ?? 0) < 500;
}

/**
 * Whether a timeout's status (408, or 504 as a gateway's) was written after the handler
 * returned its value, which it did not choose (`@HttpCode`, a status set on `@Res()`): an
 * outer timeout fired while an interceptor of the app's still worked on the value.
 */
export function isOuterTimeout(answer: Omit<WrittenAnswer, 'writeThrew'>): boolean {
  if (!answer.returned || (answer.status !== 408 && answer.status !== 504)) return false;
  return answer.httpCode !== answer.status && answer.statusWhenReturned !== answer.status;
}

/**
 * Watches the adapter's write of a value for the request (Nest's Express adapter writes an
 * object with `res.json()`, its Fastify adapter with `reply.send()`, which serializes it
 * there): `onThrow` is called when it throws (`JSON.stringify` refusing a `BigInt` or a
 * cycle), before the error goes on to Nest's exception filters, which may answer anything.
 */
export function watchJsonWrite(response: object, onThrow: () => void): void {
  const writer = response as Record<'json' | 'send', ((body: unknown) => unknown) | undefined>;
  for (const name of ['json', 'send'] as const) {
    const write = writer[name];
    if (typeof write !== 'function') continue;
    writer[name] = function (this: unknown, body: unknown) {
      try {
        return write.call(this, body);
      } catch (error) {
        onThrow();
        throw error;
      }
    };
  }
}

/** Responses whose value Fastify could not serialize (see `watchFastifySerialization`). */
const unserialized = new WeakSet<object>();

/**
 * Fastify serializes a value after `reply.send()` has returned, and hands a failure
 * (`error.serialization` set) to its `onError` hooks, then to the error handler Nest's
 * filters answer from (which may answer anything, `200 { success: false }`): an `onError` hook
 * of the app's instance notes the response, once per instance. Where the hook cannot be added
 * (the instance has booted), the status rule of `isUnwrittenValue` is what is left.
 */
export function watchFastifySerialization(instance: unknown): void {
  const fastify = instance as {
    addHook?: (
      name: 'onError',
      hook: (request: unknown, reply: { raw: object }, error: unknown, done: () => void) => void,
    ) => unknown;
    [WATCHED]?: true;
  } | null;
  if (typeof fastify?.addHook !== 'function' || fastify[WATCHED]) return;
  try {
    fastify.addHook('onError', (_request, reply, error, done) => {
      if ((error as { serialization?: unknown } | null)?.serialization !== undefined) {
        unserialized.add(reply.raw);
      }
      done();
    });
    fastify[WATCHED] = true;
  } catch {
    // Booted already: hooks are closed.
  }
}

const WATCHED = Symbol('idempotency.watchFastifySerialization');

/** Whether Fastify failed to serialize the value written to `raw` (`watchFastifySerialization`). */
export function serializationFailed(raw: object): boolean {
  return unserialized.has(raw);
}

const CANCELLED = new Error('the Observable the handler resolved to was cancelled by a timeout');

/**
 * Whether `error` is the outcome `handlerOutcome` gives a handler whose Observable a timeout
 * cancelled: not the handler's own error (nothing of it is an answer to store), so the edge
 * rolls its work back and gives its key back, as for the timeout itself.
 */
export function isCancelled(error: unknown): boolean {
  return error === CANCELLED;
}

/**
 * What the handler itself will settle with, given what it returned (`handlerReturned`): its
 * Promise's outcome, or its value at once; undefined for an Observable, which an interceptor
 * that gave up on it unsubscribed (its work is cancelled, not going on), or for a handler that
 * threw at once (nothing returned).
 */
export function handlerOutcome(
  returned: { value: unknown } | undefined,
): Promise<{ value: unknown } | { error: unknown }> | undefined {
  // Threw at once (nothing returned): nothing goes on.
  if (!returned || isObservable(returned.value)) return undefined;
  return Promise.resolve(returned.value).then(
    // An async handler that resolves to an Observable (an `HttpService` call after a write):
    // the timeout unsubscribed from that too, its work cancelled: no value to store.
    (value: unknown) => (isObservable(value) ? { error: CANCELLED } : { value }),
    (error: unknown) => ({ error }),
  );
}

/**
 * The handler's own outcome still to come when what the chain gives now is not its answer, or
 * undefined when it is: a timeout's error of an interceptor inside `@Idempotent()` while the
 * handler's Promise goes on, or a value given while that Promise has not resolved or the
 * Observable it answered with has given nothing (a `timeout()` with a fallback, a `race()`
 * with a cached value). Either goes out unstored, and
 * the handler commits with its own answer when it settles. Routes and fields alike.
 */
export function outcomeStillToCome(
  context: IdempotencyContext,
  given: { error: unknown } | { value: unknown },
): Promise<{ value: unknown } | { error: unknown }> | undefined {
  // While the handler's own Promise has not resolved, or its Observable has neither given a
  // value nor ended.
  // A timeout after it resolved (an interceptor of the app's still working on its value, an
  // envelope awaiting a slow service) is not one its answer is still to come from: the route's
  // answer was never made, and the request is given back (adversary 48b).
  const stillComing =
    context.lastTry?.pending === true ||
    (context.handlerAnsweredWithObservable && !context.handlerObservableAnswered);
  const notItsAnswer =
    'error' in given
      ? isTimeoutError(given.error) && context.handlerStarted && context.lastTry?.pending === true
      : stillComing;
  return notItsAnswer ? handlerOutcome(context.handlerReturned) : undefined;
}
