import { privilegeProblem } from '../storage/schema-check.js';

/**
 * The health indicator's verdict, a pure function of what it read: the store unreachable, its
 * table missing or not writable by the app's role, or a key left unfinished for longer than the
 * bound are each `down`.
 */

/** What one look at the store found; `unreachable` when it did not answer. */
export type StoreReading =
  | { kind: 'unreachable'; error: string }
  | {
      kind: 'read';
      schemaPresent: boolean;
      oldestUnfinishedAgeMs: number | null;
      /** Of SELECT, INSERT, UPDATE, DELETE on the keys table, those the app's role lacks. */
      missingPrivileges?: readonly string[];
      role?: string;
    };

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
  // A role that may only read answers every keyed request 500: as down as a missing table.
  if (reading.missingPrivileges && reading.missingPrivileges.length > 0) {
    return {
      up: false,
      data: {
        message: privilegeProblem(
          reading.role ?? 'current_user',
          'idempotency_keys',
          reading.missingPrivileges,
        ),
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
