import pg, { type PoolClient, type QueryConfig } from 'pg';
import { asDatabaseFailure } from './connection-errors.js';
import { withDeadline } from './deadline.js';

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

/** The part of node-postgres' protocol connection that a query writes to. */
interface ProtocolConnection {
  execute(config: { portal: string; rows?: number }): void;
  parse(config: { text: string; name?: string; types?: unknown[] }): void;
  bind(config: { portal?: string; statement?: string; values?: unknown[] }): void;
  sync(): void;
}

type QueryClass = new (
  config: QueryConfig,
  values: undefined,
  callback: (error: Error | null) => void,
) => object;

/**
 * node-postgres' own prepared query (parameters sent in binary, as always), with one thing
 * added: after its Execute, and before the Sync that ends the round trip, an unnamed `COMMIT`
 * is parsed, bound and executed. PostgreSQL skips every message up to the Sync after an error
 * in the extended protocol, so a fence that fails never reaches the `COMMIT`; and the
 * parameters (the stored response, a payment's personal data) are never written into the
 * statement's text, so they reach no server log.
 */
class FencedCommitQuery extends (pg.Query as unknown as QueryClass) {
  _getRows(connection: ProtocolConnection, rows?: number): void {
    connection.execute({ portal: '', rows });
    connection.parse({ text: 'COMMIT' });
    connection.bind({});
    connection.execute({ portal: '' });
    connection.sync();
  }
}

/**
 * Runs the fenced statement and `COMMIT` in one round trip, bounded by `timeoutMs`. Resolves
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
): Promise<void> {
  const done = new Promise<void>((resolve, reject) => {
    const query = new FencedCommitQuery(
      {
        // A name of its own: node-postgres keeps one text per prepared statement name.
        name: statement.name === undefined ? undefined : `${statement.name}_commit`,
        text: raiseUnlessOneRow(statement.text),
        values: statement.values,
      },
      undefined,
      // A socket's error (ECONNRESET) is marked as the database's: the outcome is unknown.
      (error) => (error ? reject(asDatabaseFailure(error)) : resolve()),
    );
    void client.query(query as unknown as pg.Query);
  });
  return withDeadline(done, timeoutMs, `statement ${statement.name ?? ''} with COMMIT`);
}
