/**
 * The health indicator's verdict, a pure function of what it read: the store unreachable, its
 * table missing, or a key left unfinished for longer than the bound are each `down`.
 */

/** What one look at the store found; `unreachable` when it did not answer. */
export type StoreReading =
  | { kind: 'unreachable'; error: string }
  | { kind: 'read'; schemaPresent: boolean; oldestUnfinishedAgeMs: number | null };

export type StoreHealth =
  | { up: true; data: { oldestUnfinishedAgeMs: number | null } }
  | { up: false; data: { message: string } & Record<string, unknown> };

export function storeHealth(reading: StoreReading, maxUnfinishedAgeMs: number): StoreHealth {
  if (reading.kind === 'unreachable') {
    return {
      up: false,
      data: { message: 'the idempotency store is unreachable', error: reading.error },
    };
  }
  if (!reading.schemaPresent) {
    return {
      up: false,
      data: {
        message:
          "table idempotency_keys is missing: run the library's migrations " +
          "(IDEMPOTENCY_MIGRATIONS in the DataSource's migrations)",
      },
    };
  }
  const age = reading.oldestUnfinishedAgeMs;
  if (age !== null && age > maxUnfinishedAgeMs) {
    return {
      up: false,
      data: {
        message:
          `a key has been unfinished for longer than ${maxUnfinishedAgeMs} ms ` +
          '(maxUnfinishedAgeMs): its worker died and no retry came, or its work hangs',
        oldestUnfinishedAgeMs: age,
        maxUnfinishedAgeMs,
      },
    };
  }
  return { up: true, data: { oldestUnfinishedAgeMs: age } };
}
