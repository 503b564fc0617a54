import { type Pool } from 'pg';
import { type DataSource, type EntityManager } from 'typeorm';
import { LazyTransaction } from './lazy-transaction.js';
import { PoolTransaction } from './pool-transaction.js';
import { type RequestTransaction } from '../transaction/request-transaction.js';
import { transactionScope } from '../transaction/transaction-scope.js';
import { DataLayerEndedError } from '../connection/driver-errors/ended.js';
import { joinTransactionsOfPool } from './pool-join.js';
import { watchCancels } from './cancel-watch.js';

/**
 * The app's data layer as the library meets it: the pool its own statements run on, and the
 * transactions the handler's writes join. TypeORM's DataSource, or a node-postgres pool that
 * Prisma, Drizzle or Kysely run on.
 */
export interface DataLayer {
  /** The app's pool; read on each call (TypeORM may reconnect). */
  pool(): Pool;
  /** A request's (or phase's) transaction, opened by its first statement. */
  transaction(timeoutMs: number, joinable: boolean, namedStatements: boolean): RequestTransaction;
}

/**
 * The app's TypeORM DataSource: its runners join the request's transaction. The request's
 * connection is a client of TypeORM's own driver pool, and a cancel its code sends (an
 * `outside()` watchdog's `pg_cancel_backend`) goes through that pool or a replica's: each is
 * watched (`watchCancels`), as a joined pool is, so that its answer is told from an operator's.
 * Read on each call: a DataSource initialized again has new pools.
 */
export function typeOrmDataLayer(dataSource: () => DataSource): DataLayer {
  const pool = () => {
    const source = dataSource();
    const driver = source.driver as unknown as { master?: Pool; slaves?: unknown };
    if (!source.isInitialized || !driver.master) {
      throw new DataLayerEndedError('the TypeORM DataSource is not initialized');
    }
    watchCancels(driver.master);
    if (Array.isArray(driver.slaves)) for (const replica of driver.slaves) watchCancels(replica);
    return driver.master;
  };
  return {
    pool,
    transaction: (timeoutMs, joinable, named) =>
      new LazyTransaction(dataSource(), pool, timeoutMs, joinable, named),
  };
}

/** A node-postgres pool of the app's, made to join the request's transaction in its scope. */
export function poolDataLayer(pool: Pool): DataLayer {
  joinTransactionsOfPool(pool);
  return {
    pool: () => pool,
    transaction: (timeoutMs, joinable, named) =>
      new PoolTransaction(pool, timeoutMs, joinable, named),
  };
}

/**
 * Runs `work` in `transaction` (one of the data layer's, not yet opened) and commits it with
 * nothing of the library's: a consumer's delivery, a phase of a request with no key. It is the
 * same lazy transaction as a request's, on either data layer, so what the work's code sends
 * joins it in its scope, and every wait of the library's (the connection, BEGIN, COMMIT) is
 * bounded; the work's statements are the app's. Its connection is the library's, so an error
 * it raises as it breaks is known as the database's (TypeORM's own runner, which TypeORM
 * released when its connection failed, threw "already released" errors that said nothing of
 * it: a consumer answered 500 in an outage).
 */
export async function runInOwnTransaction<T>(
  transaction: RequestTransaction,
  work: (manager: EntityManager) => Promise<T>,
): Promise<T> {
  try {
    const result = await transactionScope.run(transaction, () => work(transaction.manager));
    await transaction.commitPlain();
    return result;
  } catch (error) {
    await transaction.rollback();
    // What its code met, as a request's failure is read (`failureOf`): a "transaction is
    // aborted" after a failure it caught is that failure; a read-only refusal of its own
    // making stays its own through a data layer's wrapper.
    throw transaction.failureOf(error);
  }
}
