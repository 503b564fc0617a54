import { type Pool, type PoolClient, type QueryConfig } from 'pg';
import {
  type DataSource,
  type EntityManager,
  type QueryRunner,
  type ReplicationMode,
} from 'typeorm';
import { isTransactionAbortedError } from '../storage/connection-errors.js';
import { acquire, queryWithDeadline, withDeadline } from '../storage/deadline.js';
import { type JoinableTransaction, ownQueryRunner } from './transaction-scope.js';

/** A statement of the library's own, run last in a transaction: it must touch one row. */
export interface FencedStatement {
  name: string;
  text: string;
  values: unknown[];
}

/** Thrown to code that uses the transaction after it committed or rolled back. */
export class TransactionEndedError extends Error {
  constructor() {
    super(
      'The idempotent request’s transaction has already ended: database work belongs before ' +
        'the handler answers, not in a callback that outlives it.',
    );
    this.name = 'TransactionEndedError';
  }
}

/**
 * The transaction could not commit because one of its statements had failed before (SQLSTATE
 * 25P02): the handler caught that error and went on, but PostgreSQL had already aborted
 * everything. `cause` is the statement's own error.
 */
export class TransactionAbortedError extends Error {
  constructor(override readonly cause: unknown) {
    super(`the transaction was aborted by an earlier failed statement: ${String(cause)}`);
    this.name = 'TransactionAbortedError';
  }
}

/**
 * A transaction opened by its first statement, not before: a handler that waits on something
 * else (an HTTP call, a queue) before it writes holds no connection while it waits. It ends
 * with a fenced statement of the library's (the stored response, or a phase's recovery
 * point) and `COMMIT`, or with `ROLLBACK`; with no statement of its own, the fenced statement
 * alone commits, so a handler that wrote nothing costs one statement, not three.
 *
 * Every wait on PostgreSQL the library makes here is bounded by `timeoutMs`; a commit whose
 * answer does not come in time drops its connection (PostgreSQL then rolls back whatever had
 * not committed) and the caller answers 503: a retry finds the work either done or not done.
 */
export class LazyTransaction implements JoinableTransaction {
  private runner?: QueryRunner;
  private opening?: Promise<PoolClient>;
  private state: 'pending' | 'ending' | 'ended' = 'pending';
  /** The last statement error its code saw: what aborted the transaction, if it was aborted. */
  private lastError?: unknown;

  constructor(
    private readonly dataSource: DataSource,
    private readonly pool: () => Pool,
    private readonly timeoutMs: number,
    /** Whether code in the scope joins it; explicit use of `manager` always does. */
    public joinable: boolean,
  ) {}

  /** Whether a statement has opened it (it holds a connection). */
  get begun(): boolean {
    return this.opening !== undefined;
  }

  /** Whether it committed or rolled back (or is doing so). */
  get ended(): boolean {
    return this.state !== 'pending';
  }

  /** Its EntityManager; nothing is sent until the first statement. */
  get manager(): EntityManager {
    return this.ensureRunner().manager;
  }

  joinedRunner(mode: ReplicationMode): QueryRunner | undefined {
    if (!this.joinable || this.ended) return undefined;
    // A read before the first write needs no transaction: it borrows a connection for itself
    // alone, so a handler that reads, then waits on something else, holds none while it waits.
    if (mode === 'slave' && !this.begun) return undefined;
    return this.ensureRunner();
  }

  /**
   * Runs `statement` last and commits; false (everything rolled back) when it touched no row,
   * which for the library's fenced statements means the lease was lost.
   */
  async commitWith(statement: FencedStatement): Promise<boolean> {
    if (this.ended) throw new TransactionEndedError();
    this.state = 'ending';
    const config: QueryConfig = {
      name: statement.name,
      text: statement.text,
      values: statement.values,
    };
    if (!this.opening) {
      this.state = 'ended';
      const client = await acquire(this.pool(), this.timeoutMs);
      try {
        const { rowCount } = await queryWithDeadline(client, config, this.timeoutMs);
        client.release();
        return rowCount === 1;
      } catch (error) {
        client.release(asError(error));
        throw error;
      }
    }
    const client = await this.opening.catch((error: unknown) => {
      this.state = 'ended';
      throw error;
    });
    try {
      const { rowCount } = await queryWithDeadline(client, config, this.timeoutMs);
      if (rowCount !== 1) {
        await queryWithDeadline(client, { text: 'ROLLBACK' }, this.timeoutMs);
        this.end(client);
        return false;
      }
      await queryWithDeadline(client, { text: 'COMMIT' }, this.timeoutMs);
      this.end(client);
      return true;
    } catch (error) {
      if (isTransactionAbortedError(error)) {
        await this.rollbackOn(client);
        throw new TransactionAbortedError(this.lastError ?? error);
      }
      // The commit's outcome is unknown: the connection goes, and PostgreSQL rolls back what
      // had not committed. The fenced statement's row lock orders any later takeover after it.
      this.end(client, error);
      throw error;
    }
  }

  /** Rolls back (if a statement opened it) and gives the connection back. Never throws. */
  async rollback(): Promise<void> {
    if (this.state === 'ended') return;
    this.state = 'ending';
    if (!this.opening) {
      this.state = 'ended';
      return;
    }
    const client = await this.opening.catch(() => undefined);
    if (!client) {
      this.state = 'ended';
      return;
    }
    await this.rollbackOn(client);
  }

  private async rollbackOn(client: PoolClient): Promise<void> {
    try {
      await queryWithDeadline(client, { text: 'ROLLBACK' }, this.timeoutMs);
      this.end(client);
    } catch (error) {
      this.end(client, error);
    }
  }

  private end(client: PoolClient, error?: unknown): void {
    this.state = 'ended';
    if (this.runner) (this.runner as { isReleased: boolean }).isReleased = true;
    client.release(error === undefined ? undefined : asError(error));
  }

  /**
   * TypeORM's runner, set up to look like an open transaction from the start, so that what
   * code in the scope does with it nests: its `startTransaction()` is a savepoint, its commit
   * releases the savepoint, and its `release()` leaves the connection to us.
   */
  private ensureRunner(): QueryRunner {
    if (this.ended) throw new TransactionEndedError();
    if (this.runner) return this.runner;
    const runner = ownQueryRunner(this.dataSource);
    const internals = runner as unknown as RunnerInternals;
    internals.isTransactionActive = true;
    internals.transactionDepth = 1;
    internals.connect = () => this.open(internals);
    internals.release = () => Promise.resolve();
    const query = runner.query.bind(runner) as (...args: unknown[]) => Promise<unknown>;
    internals.query = async (...args: unknown[]) => {
      try {
        return await query(...args);
      } catch (error) {
        this.lastError = error;
        throw error;
      }
    };
    this.runner = runner;
    return runner;
  }

  /** The connection and `BEGIN`, on the first statement; bounded like every wait here. */
  private open(runner: RunnerInternals): Promise<PoolClient> {
    if (this.ended) return Promise.reject(new TransactionEndedError());
    this.opening ??= (async () => {
      const client = await acquire(this.pool(), this.timeoutMs);
      try {
        await withDeadline(client.query('BEGIN'), this.timeoutMs, 'BEGIN');
      } catch (error) {
        client.release(asError(error));
        throw error;
      }
      runner.databaseConnection = client;
      return client;
    })();
    return this.opening;
  }
}

/** The members of TypeORM's PostgresQueryRunner that are set here (public, but readonly). */
interface RunnerInternals {
  isTransactionActive: boolean;
  transactionDepth: number;
  databaseConnection: unknown;
  connect(): Promise<unknown>;
  release(): Promise<void>;
  query(...args: unknown[]): Promise<unknown>;
}

function asError(error: unknown): Error {
  return error instanceof Error ? error : new Error(String(error));
}
