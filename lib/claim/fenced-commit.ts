import { type PoolClient } from 'pg';
import { RESTORE_SESSION_STATE, runSurrounded } from '../connection/session-state.js';

/**
 * The fenced `UPDATE` made to fail when it touches no row (the lease was lost): `1 / count(*)`
 * divides by zero (SQLSTATE 22012) then, and the `COMMIT` sent with it is skipped.
 */
export function raiseUnlessOneRow(update: string): string {
  return `WITH fenced AS (${update} RETURNING 1) SELECT 1 / count(*) AS fenced FROM fenced`;
}

/** SQLSTATE 22012 from `raiseUnlessOneRow`: the fence held no row. */
export function isFenceLost(error: unknown): boolean {
  return (error as { code?: unknown } | undefined)?.code === '22012';
}

/**
 * Runs the fenced statement and `COMMIT` in one round trip, bounded by `timeoutMs`: an unnamed
 * `COMMIT` is parsed, bound and executed after it, before the Sync, so that a fence that fails
 * never reaches it (PostgreSQL skips every message up to the Sync after an error), and the
 * parameters (the stored response, a payment's personal data) are never written into a text. Resolves
 * when both ran; rejects with SQLSTATE 22012 (`isFenceLost`) when the fence held no row, and
 * the transaction is then aborted: the caller rolls back. Past the deadline it is not
 * cancelled, only its connection dropped: a cancel would end a wait in `SyncRep` with the
 * answer committed on the primary alone (see `queryWithDeadline`'s `commits`).
 */
export function fencedCommit(
  client: PoolClient,
  /** `name` undefined: sent unnamed (behind a pooler in transaction mode). */
  statement: { name?: string; text: string; values: unknown[] },
  timeoutMs: number,
  /** What puts back the state the transaction began with (see `restoreSessionState`). */
  restore: string = RESTORE_SESSION_STATE,
): Promise<void> {
  // The role and search path the transaction began with first (see `session-state.ts`): the
  // handler may have narrowed its own with `SET LOCAL`, which lasts until this COMMIT.
  return runSurrounded(
    client,
    {
      // A name of its own: node-postgres keeps one text per prepared statement name.
      name: statement.name === undefined ? undefined : `${statement.name}_commit`,
      text: raiseUnlessOneRow(statement.text),
      values: statement.values,
    },
    timeoutMs,
    { before: [restore], after: ['COMMIT'] },
  ).then(() => undefined);
}
