import { type Pool } from 'pg';
import { type DataSource, type EntityManager } from 'typeorm';
import { LazyTransaction } from '../transaction/lazy-transaction.js';
import { PoolTransaction } from '../transaction/pool-transaction.js';
import { type RequestTransaction } from '../transaction/request-transaction.js';
import { transactionScope } from '../transaction/transaction-scope.js';
import { joinTransactionsOfPool } from '../transaction/pool-join.js';

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
  /** Runs `work` in a plain transaction of the app's: phases of a request that has no key. */
  runInTransaction<T>(work: (manager: EntityManager) => Promise<T>, timeoutMs: number): Promise<T>;
}

/** The app's TypeORM DataSource: its runners join the request's transaction. */
export function typeOrmDataLayer(dataSource: () => DataSource): DataLayer {
  const pool = () => {
    const source = dataSource();
    const driver = source.driver as unknown as { master?: Pool };
    if (!source.isInitialized || !driver.master) {
      throw new Error('the TypeORM DataSource is not initialized');
    }
    return driver.master;
  };
  return {
    pool,
    transaction: (timeoutMs, joinable, named) =>
      new LazyTransaction(dataSource(), pool, timeoutMs, joinable, named),
    runInTransaction: (work) => dataSource().transaction(work),
  };
}

/** A node-postgres pool of the app's, made to join the request's transaction in its scope. */
export function poolDataLayer(pool: Pool): DataLayer {
  joinTransactionsOfPool(pool);
  const layer: DataLayer = {
    pool: () => pool,
    transaction: (timeoutMs, joinable, named) =>
      new PoolTransaction(pool, timeoutMs, joinable, named),
    runInTransaction: async (work, timeoutMs) => {
      // The timeout bounds the library's own waits (the connection, BEGIN, COMMIT), as on
      // every other transaction; the work's statements are the app's.
      const transaction = layer.transaction(timeoutMs, true, false);
      try {
        const result = await transactionScope.run(transaction, () => work(transaction.manager));
        await transaction.commitPlain();
        return result;
      } catch (error) {
        await transaction.rollback();
        throw error;
      }
    },
  };
  return layer;
}
