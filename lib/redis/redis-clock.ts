/**
 * Where Redis's clock stands against this process's (`Date.now()`), learned from the time its
 * scripts report (`TIME`), so that a claim can carry a deadline Redis checks on its own clock.
 *
 * A reply that says Redis read `redisNowMs` and arrived here at `localMs` gives a lower bound
 * on the offset: Redis read its clock before the reply left. The largest lower bound is the
 * closest, and a deadline computed with it is never later than the moment this process gives
 * up (it may be early by the reply's transit, which errs to refusing). A bound older than
 * `MAX_AGE_MS` gives way to the next one, so that a step of either clock is followed.
 */
export interface ClockOffset {
  /** Redis's clock minus this process's, in milliseconds: at most the true offset. */
  offsetMs: number;
  /** When it was learned (`performance.now()`), or undefined before the first reply. */
  learnedAt: number | undefined;
}

export const MAX_AGE_MS = 60_000;

/** The offset before any reply: the clocks taken as one (a host's, or NTP's). */
export const UNKNOWN_OFFSET: ClockOffset = { offsetMs: 0, learnedAt: undefined };

/** The offset after one more reply of Redis's time. */
export function nextOffset(
  previous: ClockOffset,
  redisNowMs: number,
  localMs: number,
  monotonicMs: number,
): ClockOffset {
  const sample = redisNowMs - localMs;
  const stale = previous.learnedAt === undefined || monotonicMs - previous.learnedAt > MAX_AGE_MS;
  return stale || sample > previous.offsetMs
    ? { offsetMs: sample, learnedAt: monotonicMs }
    : previous;
}

/** The deadline of a call that gives up `timeoutMs` after `localMs`, on Redis's clock. */
export function redisDeadlineMs(offset: ClockOffset, localMs: number, timeoutMs: number): number {
  return Math.floor(localMs + offset.offsetMs + timeoutMs);
}
