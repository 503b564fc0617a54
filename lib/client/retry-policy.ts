/**
 * The design's client rules as pure decisions: which answers end an operation, and how long
 * to wait before the next attempt. No I/O, so that they run (and are tested) anywhere.
 */

/** What to do after one attempt. */
export type AttemptOutcome = 'done' | 'retry';

/**
 * Answers that say nothing final about the operation, whatever else they carry: nothing was
 * stored for them, and the same key may still be running, or may run. 408: an outer timeout
 * (a global `timeout()` interceptor) gave up while the handler goes on in its transaction and
 * commits (the README's "outer timeout" row); RFC 9110 lets a client repeat the request. 425:
 * the server would not risk running it from early data (RFC 8470); asked again, it runs. 409:
 * the key is in progress elsewhere (or this worker lost its lease). 429: not let in yet.
 */
const NOT_FINAL = new Set([408, 409, 425, 429]);

/**
 * Whether an answer ends the operation. A replayed answer always does: it is the stored one,
 * and asking again only gets it again. A 2xx does. Answers that are not the operation's
 * (`NOT_FINAL`: 408, 409, 425, 429) and 5xx are retried with the same key, which stays kept:
 * the work either finishes elsewhere, and the retry gets its stored answer, or resumes. Ending
 * on one would forget the key, and the intent's next call would run the work a second time
 * under a new one. Any other 4xx is final: the request itself is wrong, and the same key would
 * be answered the same. `status` 0 is an attempt that got no answer (a dropped connection, a
 * timeout): retried.
 */
export function outcomeOf(status: number, replayed: boolean): AttemptOutcome {
  if (replayed) return 'done';
  if (status === 0) return 'retry';
  if (NOT_FINAL.has(status) || status >= 500) return 'retry';
  return 'done';
}

/**
 * `Retry-After` in milliseconds: delta-seconds or an HTTP date; undefined when absent or
 * unreadable. Capped at `maxMs`, so that a server cannot park a client for a day.
 */
export function retryAfterMs(
  header: string | null | undefined,
  now: number,
  maxMs: number,
): number | undefined {
  if (!header) return undefined;
  const trimmed = header.trim();
  // delta-seconds, or an HTTP date (which names its day and month in letters).
  const ms = /^\d+$/.test(trimmed)
    ? Number(trimmed) * 1000
    : /[A-Za-z]/.test(trimmed)
      ? Date.parse(trimmed) - now
      : NaN;
  if (!Number.isFinite(ms)) return undefined;
  return Math.min(Math.max(0, ms), maxMs);
}

/**
 * The wait before attempt `attempt + 1` (attempt counts from 0): exponential backoff with
 * full jitter, so that many clients retrying after one outage spread out instead of arriving
 * together, and never less than the server's `Retry-After`.
 */
export function nextDelayMs(
  attempt: number,
  options: { baseDelayMs: number; maxDelayMs: number; random: number; retryAfterMs?: number },
): number {
  const ceiling = Math.min(options.maxDelayMs, options.baseDelayMs * 2 ** attempt);
  const jittered = Math.floor(options.random * ceiling);
  return Math.max(jittered, options.retryAfterMs ?? 0);
}
