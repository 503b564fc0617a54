/** What of a key's record the age of its hold is read from (see MemoryClaimRecord). */
export interface HoldFields {
  createdAt: number;
  /** When a takeover began its current hold; absent while it is its first claim's. */
  leasedAt?: number;
  /** Given back by its owner (a 503 to retry, a job between its steps). */
  released?: boolean;
  finished: boolean;
}

/**
 * When a key's current hold began, for the oldest-unfinished gauge, as PostgreSQL's
 * OLDEST_UNFINISHED reads it (`coalesce(leased_at, created_at)` of keys unfinished and not
 * given back): undefined for a key that is finished, or given back and waiting for a retry
 * its client may never send. From its last takeover, not its creation: a job's later step,
 * or a request resumed by its retry long after a 503, is as old as its hold (adversary 78).
 */
export function holdStartedAt(record: HoldFields): number | undefined {
  if (record.finished || record.released) return undefined;
  return record.leasedAt ?? record.createdAt;
}
