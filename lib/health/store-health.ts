import { privilegeProblem, usageProblem } from '../schema/schema-check.js';

/**
 * The health indicator's verdict, a pure function of what it read: the store unreachable, its
 * table missing, out of the role's reach (its schema) or not writable by the app's role, or a key left unfinished for longer than the
 * bound are each `down`.
 */

/** What one look at the store found; `unreachable` when it did not answer. */
export type StoreReading =
  | { kind: 'unreachable'; error: string }
  | {
      kind: 'read';
      schemaPresent: boolean;
      /**
       * The oldest key held under a lease still running (its worker alive, renewing it), aged
       * from when that hold began (its claim, or the takeover that resumed it: a job's later
       * step, a retry after a 503), not from its creation. The same for `oldestExpiredAgeMs`.
       */
      oldestUnfinishedAgeMs: number | null;
      /**
       * The oldest key whose lease ran out and that nobody took over: its worker died. A key
       * given back on purpose (a 503 to retry: `locked_until` NULL) is neither: it waits for
       * its client's retry, and the purge takes it if none comes.
       */
      oldestExpiredAgeMs?: number | null;
      /** Of SELECT, INSERT, UPDATE, DELETE on the keys table, those the app's role lacks. */
      missingPrivileges?: readonly string[];
      /**
       * Not present: the schema of the role's `search_path` that holds the keys table and that
       * the role may not use (PostgreSQL leaves it out of the path), when there is one.
       */
      unusableSchema?: string | null;
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
  // There, but out of reach: the migrations ran, the GRANT USAGE is what is missing.
  if (!reading.schemaPresent && reading.unusableSchema) {
    return {
      up: false,
      data: {
        message: usageProblem(reading.role ?? 'current_user', reading.unusableSchema, [
          'idempotency_keys',
        ]),
      },
    };
  }
  if (!reading.schemaPresent) {
    return {
      up: false,
      data: {
        message:
          "table idempotency_keys is missing: run the library's migrations (on a pg.Pool: " +
          "migrations/schema.sql; on TypeORM: IDEMPOTENCY_MIGRATIONS in the DataSource's " +
          'migrations)',
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
  const held = reading.oldestUnfinishedAgeMs;
  const expired = reading.oldestExpiredAgeMs ?? null;
  const age = held === null ? expired : expired === null ? held : Math.max(held, expired);
  const past = (ms: number | null) => ms !== null && ms > maxUnfinishedAgeMs;
  if (past(expired) || past(held)) {
    const cause = past(expired)
      ? 'its lease ran out and no retry took it over: its worker died'
      : 'its lease is still renewed: its work hangs';
    return {
      up: false,
      data: {
        message:
          `a key has been unfinished for longer than ${maxUnfinishedAgeMs} ms ` +
          `(maxUnfinishedAgeMs): ${cause}`,
        oldestUnfinishedAgeMs: age,
        maxUnfinishedAgeMs,
      },
    };
  }
  return { up: true, data: { oldestUnfinishedAgeMs: age } };
}
