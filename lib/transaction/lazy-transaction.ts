import { type Pool, type PoolClient, type QueryConfig } from 'pg';
import {
  type DataSource,
  type EntityManager,
  type QueryRunner,
  type ReplicationMode,
} from 'typeorm';
import { isTransactionAbortedError, markDatabaseFailure } from '../storage/connection-errors.js';
import { acquire, queryWithDeadline, withDeadline } from '../storage/deadline.js';
import { beginWith, canBeginWith } from '../storage/begin-with.js';
import { fencedCommit, isFenceLost } from '../storage/fenced-commit.js';
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
      'The idempotent request’s transaction was rolled back: work it left running must not ' +
        'commit on its own, since a retry runs the request again. Await database work before ' +
        'answering, or start work that is not the request’s with IdempotentTransaction.outside().',
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
  /** Set once `BEGIN` is on its way (alone, or in front of the first statement). */
  private beginning?: Promise<void>;
  private state: 'pending' | 'ending' | 'ended' = 'pending';
  /** The commit or rollback under way: a second end waits for it rather than racing it. */
  private ending?: Promise<unknown>;
  private released = false;
  /** Whether it committed: work that comes after then runs on its own, as after any answer. */
  private committed = false;
  /** The last statement error its code saw: what aborted the transaction, if it was aborted. */
  lastError?: unknown;

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

  joinedRunner(dataSource: DataSource, _mode: ReplicationMode): QueryRunner | undefined {
    if (!this.joinable || dataSource !== this.dataSource) return undefined;
    if (this.ended) {
      // After the answer committed, work the handler left running (an event listener it did
      // not await) runs on its own, as it would without the library: a replay never runs it
      // again. After a rollback it must not commit apart: the retry runs the handler again.
      if (this.committed) return undefined;
      throw new TransactionEndedError();
    }
    return this.ensureRunner();
  }

  /**
   * Runs `statement` last and commits; false (everything rolled back) when it touched no row,
   * which for the library's fenced statements means the lease was lost.
   */
  commitWith(statement: FencedStatement): Promise<boolean> {
    if (this.ended) return Promise.reject(new TransactionEndedError());
    this.state = 'ending';
    const committing = this.commitNow(statement);
    this.ending = committing.catch(() => undefined);
    return committing;
  }

  private async commitNow(statement: FencedStatement): Promise<boolean> {
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
        this.committed = rowCount === 1;
        return this.committed;
      } catch (error) {
        client.release(asError(error));
        throw error;
      }
    }
    const client = await this.opening.catch((error: unknown) => {
      this.state = 'ended';
      throw error;
    });
    if (!this.beginning) {
      // A connection was taken but no statement sent on it: the fenced statement commits alone.
      try {
        const { rowCount } = await queryWithDeadline(client, config, this.timeoutMs);
        this.committed = rowCount === 1;
        this.end(client);
        return this.committed;
      } catch (error) {
        this.end(client, error);
        throw error;
      }
    }
    try {
      await this.beginning;
    } catch (error) {
      // BEGIN itself failed (its first statement with it): there is no transaction to commit
      // the stored response with, and the handler's first write never ran.
      await this.rollbackOn(client);
      throw new TransactionAbortedError(this.lastError ?? error);
    }
    try {
      // The fenced statement and COMMIT in one round trip; a lost fence raises, and the
      // COMMIT after it is skipped.
      await fencedCommit(client, statement, this.timeoutMs);
      this.committed = true;
      this.end(client);
      return true;
    } catch (error) {
      if (isFenceLost(error)) {
        await this.rollbackOn(client);
        return false;
      }
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
    if (this.state !== 'pending') {
      await this.ending;
      return;
    }
    this.state = 'ending';
    this.ending = (async () => {
      const client = await this.opening?.catch(() => undefined);
      if (client) await this.rollbackOn(client);
      else this.state = 'ended';
    })();
    await this.ending;
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
    if (this.released) return;
    this.released = true;
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
      // A read before the first write needs no transaction: it borrows a connection for
      // itself alone, so a handler that reads, then waits on something else, holds none while
      // it waits. A locking read (`FOR UPDATE`) opens the transaction, as its lock must last.
      if (!this.opening && isPlainRead(args[0])) return this.readAlone(args);
      try {
        return await query(...args);
      } catch (error) {
        this.lastError = error;
        throw error;
      }
    };
    const stream = runner.stream.bind(runner) as (...args: unknown[]) => Promise<unknown>;
    internals.stream = async (...args: unknown[]) => {
      // A stream is handed to node-postgres as an object, which `beginWith` cannot carry: its
      // BEGIN goes first, alone, so that a failed BEGIN never leaves it running outside.
      await this.open(internals);
      await this.begin(await this.opening!);
      return stream(...args);
    };
    this.runner = runner;
    return runner;
  }

  private async readAlone(args: unknown[]): Promise<unknown> {
    const runner = ownQueryRunner(this.dataSource);
    try {
      return await (runner.query as (...a: unknown[]) => Promise<unknown>)(...args);
    } catch (error) {
      // TypeORM hands a refused connection on as the socket's error: it is the database's.
      throw markDatabaseFailure(error);
    } finally {
      await runner.release();
    }
  }

  /**
   * The connection, on the first statement; bounded like every wait here. TypeORM gets a
   * guarded view of the client: a statement of the handler's that is still on its way when
   * the transaction ends is refused, never sent after the `COMMIT` or on a connection back in
   * the pool. The first statement through it carries the `BEGIN` (at the DataSource's
   * isolation level, if it sets one) in its own round trip (`beginWith`).
   */
  private open(runner: RunnerInternals): Promise<PoolClient> {
    if (this.ended) return Promise.reject(new TransactionEndedError());
    this.opening ??= acquire(this.pool(), this.timeoutMs);
    return this.opening.then((client) => {
      const guarded = Object.create(client, {
        query: { value: (...args: unknown[]) => this.send(client, args) },
      }) as PoolClient;
      runner.databaseConnection = guarded;
      return guarded;
    });
  }

  private send(client: PoolClient, args: unknown[]): Promise<unknown> {
    if (this.ended) return Promise.reject(new TransactionEndedError());
    const query = client.query as (...a: unknown[]) => Promise<unknown>;
    if (isSubmittable(args[0])) {
      // A stream (TypeORM's `stream()`, which begins first; see `ensureRunner`): node-postgres
      // queues it behind the BEGIN, and it must be handed back as it is, not as a promise.
      void this.begin(client);
      return query.apply(client, args);
    }
    // A statement sent while the first is on its way waits for its BEGIN, and is refused if
    // the transaction ended meanwhile: it must never run after the ROLLBACK or COMMIT, nor
    // outside the transaction when BEGIN failed.
    const after = () =>
      this.ended ? Promise.reject(new TransactionEndedError()) : query.apply(client, args);
    if (this.beginning) return this.beginning.then(after);
    if (canBeginWith(args)) {
      const { result, begun } = beginWith(client, this.beginText(), args[0], args[1]);
      this.beginning = begun;
      return result;
    }
    return this.begin(client).then(after);
  }

  /** `BEGIN` in a round trip of its own: for a first statement `beginWith` cannot carry. */
  private begin(client: PoolClient): Promise<void> {
    if (this.ended && !this.beginning) return Promise.reject(new TransactionEndedError());
    this.beginning ??= withDeadline(client.query(this.beginText()), this.timeoutMs, 'BEGIN').then(
      () => undefined,
    );
    return this.beginning;
  }

  private beginText(): string {
    // TypeORM 1's option; 0.3 has none, and the server's default applies.
    const isolation = (this.dataSource.options as { isolationLevel?: string }).isolationLevel;
    return isolation ? `BEGIN ISOLATION LEVEL ${isolation}` : 'BEGIN';
  }
}

/**
 * A `SELECT` that takes no row lock and calls none of PostgreSQL's functions whose effect lasts
 * for the transaction (a setting made local, an advisory lock, a sequence, a notification) and
 * writes nothing (`INTO`): it may run before, and apart from, the transaction. A `SELECT` of an
 * app's own function that writes cannot be told from its text; run it after a write, or start
 * with it in `IdempotentTransaction.manager.transaction()`.
 */
function isPlainRead(sql: unknown): boolean {
  return (
    typeof sql === 'string' &&
    /^\s*SELECT\b/i.test(sql) &&
    !/\bFOR\s+(UPDATE|SHARE|NO\s+KEY\s+UPDATE|KEY\s+SHARE)\b/i.test(sql) &&
    !/\b(set_config|pg_advisory\w*|pg_try_advisory\w*|nextval|setval|pg_notify|txid_current|pg_current_xact_id)\s*\(|\bINTO\b/i.test(
      sql,
    )
  );
}

/** The members of TypeORM's PostgresQueryRunner that are set here (public, but readonly). */
interface RunnerInternals {
  isTransactionActive: boolean;
  transactionDepth: number;
  databaseConnection: unknown;
  connect(): Promise<unknown>;
  release(): Promise<void>;
  query(...args: unknown[]): Promise<unknown>;
  stream(...args: unknown[]): Promise<unknown>;
}

function isSubmittable(value: unknown): boolean {
  return typeof (value as { submit?: unknown } | null)?.submit === 'function';
}

function asError(error: unknown): Error {
  return error instanceof Error ? error : new Error(String(error));
}
