import { MemoryOperationStore, type PendingOperationStore } from './operation-store.js';
import { nextDelayMs, outcomeOf, retryAfterMs } from './retry-policy.js';

/** Options of `idempotentFetch()`. */
export interface IdempotentFetchOptions {
  /**
   * The user intent this request carries out ("pay order 42"): its key is made once, kept in
   * `store` before the first attempt, and sent by every attempt until the operation ends.
   */
  intent: string;
  /** @default one in-memory store for the process or page */
  store?: PendingOperationStore;
  /** @default 'Idempotency-Key' */
  headerName?: string;
  /** Attempts in all before giving up. @default 8 */
  maxAttempts?: number;
  /** Time in all before giving up, waits included. @default 60000 */
  maxElapsedMs?: number;
  /** The first backoff's ceiling; each next one doubles. @default 100 */
  baseDelayMs?: number;
  /** The largest wait between two attempts, `Retry-After` included. @default 10000 */
  maxDelayMs?: number;
  /** Each attempt's own time limit. @default 30000 */
  attemptTimeoutMs?: number;
  /** @default globalThis.fetch */
  fetch?: typeof fetch;
}

/**
 * The operation did not end within its bounds. Its key stays in the store: calling again with
 * the same intent resumes it under the same key, and the server runs it at most once.
 */
export class IdempotentRequestError extends Error {
  constructor(
    readonly intent: string,
    readonly key: string,
    readonly attempts: number,
    /** The last answer's status; 0 when it got none. */
    readonly lastStatus: number,
    override readonly cause?: unknown,
  ) {
    super(
      `${intent}: no final answer after ${attempts} attempts (last: ${lastStatus || String(cause)}); ` +
        `resume it with the same intent to reuse key ${key}`,
    );
    this.name = 'IdempotentRequestError';
  }
}

const defaultStore = new MemoryOperationStore();
/** Keys being made, per store and intent: two calls for one intent at once share one key. */
const making = new WeakMap<PendingOperationStore, Map<string, Promise<string>>>();

/**
 * The intent's key: the one kept, or a new one kept before anything is sent, so that a crash
 * after the send finds it again. A second call for the same intent while the first makes it
 * (a double click) gets the same key, and the server runs the operation once.
 */
async function keyFor(store: PendingOperationStore, intent: string): Promise<string> {
  let pending = making.get(store);
  if (!pending) making.set(store, (pending = new Map()));
  const underway = pending.get(intent);
  if (underway) return underway;
  const made = (async () => {
    const kept = await store.get(intent);
    if (kept !== undefined) return kept;
    const key = globalThis.crypto.randomUUID();
    await store.set(intent, key);
    return key;
  })();
  pending.set(intent, made);
  try {
    return await made;
  } finally {
    pending.delete(intent);
  }
}
/** Waits `ms`, or less: the caller's abort ends the wait at once, with its reason. */
function sleep(ms: number, signal?: AbortSignal | null): Promise<void> {
  return new Promise((resolve, reject) => {
    if (signal?.aborted) return reject(signal.reason as Error);
    const onAbort = () => {
      clearTimeout(timer);
      reject(signal!.reason as Error);
    };
    const timer = setTimeout(() => {
      signal?.removeEventListener('abort', onAbort);
      resolve();
    }, ms);
    signal?.addEventListener('abort', onAbort, { once: true });
  });
}

/**
 * `fetch` with the design's client rules: one key per user intent, kept before the first
 * attempt; every retry with that key and the same request; exponential backoff with full
 * jitter, never sooner than `Retry-After`; retried on no answer, 408 (an outer timeout: the
 * handler may go on and commit), 409, 425, 429 and 5xx, none of which the server stores; ended
 * by a replayed answer, a 2xx or any other 4xx, which is returned as it is. The operation's key is
 * forgotten once it ends. The body must be one that can be sent again (a string, bytes).
 *
 * @example
 * const res = await idempotentFetch('https://api.example.com/charges', {
 *   method: 'POST',
 *   headers: { 'content-type': 'application/json' },
 *   body: JSON.stringify({ amount: 1000, currency: 'eur' }),
 * }, { intent: `checkout:${cartId}`, store: new FileOperationStore('.pending.json') });
 */
export async function idempotentFetch(
  url: string | URL,
  init: RequestInit,
  options: IdempotentFetchOptions,
): Promise<Response> {
  const store = options.store ?? defaultStore;
  const send = options.fetch ?? globalThis.fetch;
  const maxAttempts = options.maxAttempts ?? 8;
  const maxElapsedMs = options.maxElapsedMs ?? 60_000;
  const maxDelayMs = options.maxDelayMs ?? 10_000;
  const started = Date.now();
  const key = await keyFor(store, options.intent);
  const headers = new Headers(init.headers);
  headers.set(options.headerName ?? 'Idempotency-Key', key);

  let lastStatus = 0;
  let lastError: unknown;
  let attempts = 0;
  for (let attempt = 0; attempt < maxAttempts; attempt++) {
    attempts++;
    let response: Response | undefined;
    const left = Math.max(1, maxElapsedMs - (Date.now() - started));
    const timeout = AbortSignal.timeout(Math.min(options.attemptTimeoutMs ?? 30_000, left));
    try {
      response = await send(url, {
        ...init,
        headers,
        // The caller's own signal still cancels: then nothing is retried.
        signal: init.signal ? AbortSignal.any([init.signal, timeout]) : timeout,
      });
    } catch (error) {
      if (init.signal?.aborted) throw error;
      lastError = error;
    }
    lastStatus = response?.status ?? 0;
    const replayed = response?.headers.get('idempotent-replayed') === 'true';
    if (response && outcomeOf(response.status, replayed) === 'done') {
      await store.delete(options.intent);
      return response;
    }
    const wait = nextDelayMs(attempt, {
      baseDelayMs: options.baseDelayMs ?? 100,
      maxDelayMs,
      random: Math.random(),
      retryAfterMs: retryAfterMs(response?.headers.get('retry-after'), Date.now(), maxDelayMs),
    });
    // The body of an answer that is not returned is read, so its connection can be reused.
    await response?.arrayBuffer().catch(() => undefined);
    if (attempt + 1 >= maxAttempts || Date.now() - started + wait > maxElapsedMs) break;
    await sleep(wait, init.signal);
  }
  throw new IdempotentRequestError(options.intent, key, attempts, lastStatus, lastError);
}
