/**
 * A field's error stored when the operation's answer goes out, not when its resolver failed.
 * A route's answer is stored as it is written, after every interceptor around the handler
 * had its say: one that retries the handler (rxjs `retry()`) runs it again, and the failed
 * try is never the key's answer. A field's answer goes to GraphQL, not to the client: what
 * reaches the client is the operation's answer, which the drivers' hooks see before it is
 * sent (Apollo's `willSendResponse`). A resolver's error waits there, its effects rolled back
 * and its key held, so that an app's retry of the field takes the key over instead of
 * replaying the error; the answer waits until the error is stored.
 *
 * Only where the hook runs for the operation (`answerHookOn`, from the driver's first hook):
 * elsewhere the error is stored before GraphQL gets it, as it always was.
 */

import { type AnsweredEntry, type ErrorLocation, answeredLocations } from './error-location.js';

/** Marks a GraphQL context whose operation's answer waits for `storeAnswersOf`. */
const HOOKED = Symbol('idempotency.answerHook');
/** The errors of an operation's fields waiting to be stored, on its context. */
const PENDING = Symbol('idempotency.pendingAnswers');

interface Hooked {
  [HOOKED]?: true;
  [PENDING]?: Set<PendingAnswer>;
}

/**
 * The errors waiting in this process, by their key (`idOf`): a claim of the same key made
 * meanwhile (the same key twice in one operation, an audit's own retry) stores the error
 * first, then replays it, rather than meet the key held by an answer that waits.
 */
const waitingByKey = new Map<string, PendingAnswer>();

/** The error of key `id` waiting to be stored in this process, if any. */
export function waitingFor(id: string): PendingAnswer | undefined {
  return waitingByKey.get(id);
}

/** A field error to store: its store, started once. */
export class PendingAnswer {
  private storing?: Promise<Error | undefined>;
  private readonly timer: NodeJS.Timeout;

  constructor(
    /** The field's path in the answer (`['pay']`), where a failed store says so. */
    readonly path: readonly (string | number)[],
    /** The resolver's error's message: its entry where the app's formatter drops the path. */
    readonly message: string,
    /** Its key (`idOf`). */
    private readonly id: string,
    /** The resolver's error's `extensions.http` (Apollo's status and headers), if any. */
    readonly http: ErrorHttp | undefined,
    /**
     * Stores the error (at the `locations` its answer gave it, when known); the field's error
     * to answer instead when that failed.
     */
    private readonly store: (answered?: readonly ErrorLocation[]) => Promise<Error | undefined>,
    private readonly pending: Set<PendingAnswer>,
    /** Stored by then whatever happens: an answer the hook never saw (its client left). */
    fallbackMs: number,
  ) {
    this.timer = setTimeout(() => void this.start(), fallbackMs);
    this.timer.unref();
    waitingByKey.set(id, this);
  }

  private forget(): void {
    if (waitingByKey.get(this.id) === this) waitingByKey.delete(this.id);
  }

  private cancelled = false;

  /**
   * Stores the error, once; what the field answers in its place if that failed. Started by
   * its fallback, it stays pending: an answer that goes out later still waits for it, and
   * says so if it failed.
   */
  start(answered?: readonly ErrorLocation[]): Promise<Error | undefined> {
    if (this.cancelled) return Promise.resolve(undefined);
    clearTimeout(this.timer);
    this.storing ??= this.store(answered)
      .catch((error: unknown) => (error instanceof Error ? error : new Error(String(error))))
      .finally(() => this.forget());
    return this.storing;
  }

  /** Never stored (a later run of the field took its claim over): false once storing began. */
  cancel(): boolean {
    if (this.storing || this.cancelled) return false;
    this.cancelled = true;
    clearTimeout(this.timer);
    this.pending.delete(this);
    this.forget();
    return true;
  }
}

/** Called by a driver's hook as an operation starts: its answer will wait for its errors. */
export function answerHookOn(context: unknown): void {
  if (typeof context === 'object' && context !== null) (context as Hooked)[HOOKED] = true;
}

/** Whether the operation whose context is `context` has a driver's answer hook (`answerHookOn`). */
export function hasAnswerHook(context: unknown): boolean {
  return typeof context === 'object' && context !== null && (context as Hooked)[HOOKED] === true;
}

/**
 * The field error's store, waiting for the operation's answer; undefined where no hook waits
 * for it (the caller stores it now).
 */
export function storeAtAnswer(
  context: unknown,
  {
    path,
    message,
    id,
    http,
  }: { path: readonly (string | number)[]; message: string; id: string; http?: ErrorHttp },
  store: (answered?: readonly ErrorLocation[]) => Promise<Error | undefined>,
  fallbackMs: number,
): PendingAnswer | undefined {
  if (typeof context !== 'object' || context === null) return undefined;
  const hooked = context as Hooked;
  if (!hooked[HOOKED]) return undefined;
  const pending = (hooked[PENDING] ??= new Set());
  const answer = new PendingAnswer(path, message, id, http, store, pending, fallbackMs);
  pending.add(answer);
  return answer;
}

/**
 * Stores the waiting errors of the operation whose context is `context`, each at the
 * `locations` the answer's `errors` give it (see `answeredLocations`); for each that could not
 * be stored, its field's path and the error to answer in place of the resolver's.
 */
export async function storeAnswersOf(
  context: unknown,
  errors?: readonly AnsweredEntry[],
): Promise<StoreFailure[]> {
  const pending = (context as Hooked | null)?.[PENDING];
  if (!pending?.size) return [];
  const answers = [...pending];
  pending.clear();
  const done = await Promise.all(
    answers.map(async (answer) => ({
      path: answer.path,
      message: answer.message,
      http: answer.http,
      error: await answer.start(answeredLocations(errors, answer.path, answer.message)),
    })),
  );
  return done.filter((entry): entry is StoreFailure => !!entry.error);
}

/** A field whose error could not be stored, and the error it answers in its place. */
export interface StoreFailure {
  path: readonly (string | number)[];
  /** The resolver's error's message, as the answer holds it. */
  message: string;
  /** What the resolver's error set on the HTTP answer (Apollo), to take back. */
  http: ErrorHttp | undefined;
  error: Error;
}

/** A GraphQL error's `extensions.http`: the status and headers Apollo gives the answer. */
export interface ErrorHttp {
  status?: number;
  headers?: Map<string, string>;
}

/** An error's `extensions.http`, when it has one Apollo would read. */
export function errorHttp(error: unknown): ErrorHttp | undefined {
  const http = (error as { extensions?: { http?: unknown } } | null)?.extensions?.http;
  if (typeof http !== 'object' || http === null) return undefined;
  const { status, headers } = http as { status?: unknown; headers?: unknown };
  return {
    status: typeof status === 'number' ? status : undefined,
    headers: headers instanceof Map ? (headers as Map<string, string>) : undefined,
  };
}

/** The path of a field in the answer, from its GraphQL `info.path`. */
export function pathOf(info: unknown): (string | number)[] {
  const path: (string | number)[] = [];
  let at = (info as { path?: { key?: unknown; prev?: unknown } } | undefined)?.path;
  while (at) {
    if (typeof at.key === 'string' || typeof at.key === 'number') path.unshift(at.key);
    at = at.prev as typeof at;
  }
  return path;
}

/** A GraphQL error as an answer's `errors` hold it (GraphQL's own `toJSON()` where it has one). */
export interface AnswerError {
  message: string;
  path?: readonly (string | number)[];
  [field: string]: unknown;
}

/**
 * The answer's errors with each field whose error could not be stored answering `error` in
 * place of the resolver's (the client must not be given an answer its retry would not get):
 * the entry of the field's path (or, without paths, of the resolver's message) replaced, or
 * added.
 */
export function withStoreFailures<
  E extends { message?: unknown; path?: readonly (string | number)[] },
>(
  errors: readonly E[] | undefined,
  failures: readonly { path: readonly (string | number)[]; message?: string; error: Error }[],
  /** The entry as the driver holds its errors (Apollo: formatted; Mercurius: with `toJSON`). */
  entryOf: (json: AnswerError) => E,
): E[] | undefined {
  if (failures.length === 0) return errors ? [...errors] : undefined;
  const answer = [...(errors ?? [])];
  for (const { path, message, error } of failures) {
    const json = (error as { toJSON?: () => AnswerError }).toJSON?.() ?? {
      message: error.message,
    };
    const entry = entryOf({ ...json, path: [...path] });
    // By its path; where the app's formatter dropped paths, by the resolver's message.
    let at = answer.findIndex((existing) => samePath(existing.path, path));
    if (at < 0 && message !== undefined) {
      at = answer.findIndex((existing) => !existing.path && existing.message === message);
    }
    if (at >= 0) answer[at] = entry;
    else answer.push(entry);
  }
  return answer;
}

function samePath(
  a: readonly (string | number)[] | undefined,
  b: readonly (string | number)[],
): boolean {
  return a !== undefined && a.length === b.length && a.every((key, i) => key === b[i]);
}
