/** A message's failed deliveries in this process. */
export interface TalliedFailures {
  /** Those that count towards giving the message up. */
  seen: number;
  /** All of them, passing failures of the database included. */
  failures: number;
}

/**
 * This process's count of each message's failed deliveries: the floor under the database's
 * count, for when that cannot be had, and the backoff's step. A message that succeeds, turns
 * out a duplicate or is given up is forgotten; past `maxEntries`, the oldest entries go first
 * (their messages went to another consumer, or will start again at the database's count).
 */
export class FailureTally {
  private readonly entries = new Map<string, TalliedFailures>();

  constructor(private readonly maxEntries = 10_000) {}

  get size(): number {
    return this.entries.size;
  }

  /** One more failed delivery; returns the message's tally, this one included. */
  add(consumer: string, messageId: string, counts: boolean): TalliedFailures {
    const id = entryId(consumer, messageId);
    const previous = this.entries.get(id) ?? { seen: 0, failures: 0 };
    const next = { seen: previous.seen + (counts ? 1 : 0), failures: previous.failures + 1 };
    // Re-inserted: the most recently failed last, the first ones to evict.
    this.entries.delete(id);
    this.entries.set(id, next);
    for (const oldest of this.entries.keys()) {
      if (this.entries.size <= this.maxEntries) break;
      this.entries.delete(oldest);
    }
    return next;
  }

  forget(consumer: string, messageId: string): void {
    this.entries.delete(entryId(consumer, messageId));
  }
}

/** Consumer names and usable message ids hold no NUL, so the pair cannot collide. */
function entryId(consumer: string, messageId: string): string {
  return `${consumer}\u0000${messageId}`;
}
