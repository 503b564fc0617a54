import { type PoolClient, type QueryResult, type QueryResultRow } from 'pg';
import { type PoolerMode } from './idempotency-options.interface.js';
import { type StoreTransaction } from './store-transaction.js';

/** A named prepared statement of the library. */
export interface Statement {
  name: string;
  text: string;
}

/**
 * The app's PostgreSQL as the stores use it: bounded statements, a connection of their own,
 * and the request's transaction. `IdempotencyDatabase` (transaction/) implements it, where
 * each member says more; the stores import this shape, never the layer that opens
 * transactions on them.
 */
export interface StoreDatabase {
  /** The pooler mode in use, as far as it is known. */
  readonly pooler: PoolerMode;
  /** Whether statements are prepared once per session under their names. */
  readonly namedStatements: boolean;
  /** The bound on every wait on PostgreSQL. */
  readonly timeoutMs: number;
  /** Once the pooler, the schema and the server's isolation level are known. */
  ready(): Promise<void>;
  /** A statement of the library's, bounded; `late` gets an answer that came after its deadline. */
  query<R extends QueryResultRow>(
    statement: Statement,
    values: unknown[],
    late?: (result: QueryResult<R>) => void,
  ): Promise<QueryResult<R>>;
  /**
   * The search path the library's own statements run with, once the start-up check passed
   * (see `resolvedLibraryPath`): maintenance on a connection of its own sets it too.
   */
  libraryPathNow(): string | undefined;
  /** A connection of its own for `work` (maintenance: expiry, partitions). */
  withConnection<T>(work: (client: PoolClient) => Promise<T>): Promise<T>;
  /** What a failure of the library's statement `what` means (503, 500 misfit, permanent). */
  failureOf(error: unknown, what: string): Error;
  /** A request's transaction, opened by its first statement. */
  transaction(joinable: boolean): StoreTransaction;
}
