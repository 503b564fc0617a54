/**
 * The design's client rules as pure decisions: which answers end an operation, and how long
 * to wait before the next attempt. No I/O, so that they run (and are tested) anywhere.
 */

/** What to do after one attempt. */
export type AttemptOutcome = 'done' | 'retry';

/**
 * Whether an answer ends the operation. A replayed answer always does: it is the stored one,
 * and asking again only gets it again. A 2xx does. 409 (the key is in progress elsewhere), 429
 * and 5xx are retried with the same key: the work either finishes elsewhere or resumes. Any
 * other 4xx is final: the request itself is wrong, and the same key would be answered the same.
 * `status` 0 is an attempt that got no answer (a dropped connection, a timeout): retried.
 */
export function outcomeOf(status: number, replayed: boolean): AttemptOutcome {
  if (replayed) return 'done';
  if (status === 0) return 'retry';
  if (status === 409 || status === 429 || status >= 500) return 'retry';
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
