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
import {
  decideIsolation,
  isAboveReadCommitted,
  isIsolationLevel,
  type IsolationLevel,
} from './isolation-level.js';
import {
  IsolationLevelRefusedError,
  TransactionAbortedError,
  TransactionControlRefusedError,
} from './seam-errors.js';
import { isPlainRead, transactionControlOf } from './sql-text.js';
import { type JoinableTransaction, ownQueryRunner } from './transaction-scope.js';

export { TransactionAbortedError } from './seam-errors.js';

/** A statement of the library's own, run last in a transaction: it must touch one row. */
export interface FencedStatement {
  name: string;
  text: string;
  values: unknown[];
}

/** Thrown to code that uses the transaction after it committed or rolled back. */
export class TransactionEndedError extends Error {
  constructor(committedMidTransaction = false) {
    super(
      committedMidTransaction
        ? 'The idempotent request’s transaction committed while a nested transaction of work ' +
            'it left running was open: the rest of that nested transaction cannot run. Await ' +
            'database work before answering, or start work that is not the request’s with ' +
            'IdempotentTransaction.outside().'
        : 'The idempotent request’s transaction was rolled back: work it left running must not ' +
            'commit on its own, since a retry runs the request again. Await database work before ' +
            'answering, or start work that is not the request’s with IdempotentTransaction.outside().',
    );
    this.name = 'TransactionEndedError';
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
  /** Whether the commit or rollback under way has an outcome (`committed` is then final). */
  private settled = false;
  /** The last statement error its code saw: what aborted the transaction, if it was aborted. */
  lastError?: unknown;
  /**
   * The isolation level the request's transaction begins at: the route's, or the one its first
   * nested transaction asked for. Unset, the DataSource's (TypeORM 1), else the server's.
   */
  isolationLevel?: IsolationLevel;
  /** The level its `BEGIN` was sent with, once sent; undefined for the server's default. */
  private begunAt?: IsolationLevel;
  /** A refused attempt of its code to end it: it can then only roll back. */
  private refused?: TransactionControlRefusedError;
  /**
   * The depth at which the runner's last `startTransaction()` failed before its savepoint
   * existed: TypeORM's `transaction()` then calls `rollbackTransaction()`, which has nothing
   * of its own to roll back, and must not reach the request's transaction.
   */
  private failedStartAt?: number;

  constructor(
    private readonly dataSource: DataSource,
    private readonly pool: () => Pool,
    private readonly timeoutMs: number,
    /** Whether code in the scope joins it; explicit use of `manager` always does. */
    public joinable: boolean,
    /** False behind a pooler in transaction mode: the fenced statement is sent unnamed. */
    private readonly namedStatements = true,
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
      // While the commit is under way, its outcome is not known yet: the runner waits for it.
      if (!this.settled) return this.runnerAfterEnd();
      if (this.committed) return undefined;
      throw new TransactionEndedError();
    }
    return this.ensureRunner();
  }

  /**
   * A runner of the DataSource's own whose first statement waits for the commit under way:
   * it then runs apart if the request committed, and is refused if it rolled back.
   */
  private runnerAfterEnd(): QueryRunner {
    const runner = ownQueryRunner(this.dataSource);
    const internals = runner as unknown as RunnerInternals;
    const connect = runner.connect.bind(runner);
    internals.connect = () => this.afterEnd(connect);
    return runner;
  }

  /** Runs `work` once the transaction's end has an outcome, if it committed; else refuses. */
  private async afterEnd<T>(work: () => Promise<T>): Promise<T> {
    await this.ending;
    if (!this.committed) throw new TransactionEndedError();
    return work();
  }

  /**
   * Runs `statement` last and commits; false (everything rolled back) when it touched no row,
   * which for the library's fenced statements means the lease was lost.
   */
  commitWith(statement: FencedStatement): Promise<boolean> {
    if (this.ended) return Promise.reject(new TransactionEndedError());
    this.state = 'ending';
    const committing = this.commitNow(statement);
    this.track(committing);
    return committing;
  }

  private track(ending: Promise<unknown>): void {
    this.ending = ending.then(
      () => (this.settled = true),
      () => (this.settled = true),
    );
  }

  private async commitNow(statement: FencedStatement): Promise<boolean> {
    if (this.refused) {
      // Its code tried to end it (and went on): what it did after assumed that ended.
      const client = await this.opening?.catch(() => undefined);
      if (client) await this.rollbackOn(client);
      else this.state = 'ended';
      throw new TransactionAbortedError(this.refused);
    }
    const name = this.namedStatements ? statement.name : undefined;
    const config: QueryConfig = { name, text: statement.text, values: statement.values };
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
      await fencedCommit(client, { ...statement, name }, this.timeoutMs);
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
    this.track(
      (async () => {
        const client = await this.opening?.catch(() => undefined);
        if (client) await this.rollbackOn(client);
        else this.state = 'ended';
      })(),
    );
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
    // The runner stays usable: a statement of its after the end is handled in `query` (it
    // runs apart once the request committed, or is refused).
    if (this.released) return;
    this.released = true;
    client.release(error === undefined ? undefined : asError(error));
  }

  /**
   * TypeORM's runner, set up to look like an open transaction from the start, so that what
   * code in the scope does with it nests: its `startTransaction()` is a savepoint, its commit
   * releases the savepoint, and its `release()` leaves the connection to us. Nothing its code
   * sends ends the request's transaction: a commit or rollback with no savepoint of its own
   * open, and `COMMIT`, `ROLLBACK`, `BEGIN`… sent as SQL, are refused (and the request can
   * then only roll back), since what followed would commit on its own, outside it.
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
    const start = runner.startTransaction.bind(runner);
    internals.startTransaction = async (level?: string) => {
      this.failedStartAt = undefined;
      const depth = internals.transactionDepth;
      try {
        await this.askIsolation(level);
        await start(level as Parameters<QueryRunner['startTransaction']>[0]);
      } catch (error) {
        if (internals.transactionDepth === depth) this.failedStartAt = depth;
        throw error;
      }
    };
    const commit = runner.commitTransaction.bind(runner);
    internals.commitTransaction = () =>
      internals.transactionDepth > 1
        ? commit()
        : Promise.reject(this.refuse('commitTransaction() with no startTransaction()'));
    const rollback = runner.rollbackTransaction.bind(runner);
    internals.rollbackTransaction = () => {
      if (this.failedStartAt === internals.transactionDepth) {
        // Its savepoint was never made: there is nothing of its own to roll back. (When the
        // SAVEPOINT failed because the transaction was aborted, the commit fails anyway.)
        this.failedStartAt = undefined;
        return Promise.resolve();
      }
      return internals.transactionDepth > 1
        ? rollback()
        : Promise.reject(this.refuse('rollbackTransaction() with no startTransaction()'));
    };
    const query = runner.query.bind(runner) as (...args: unknown[]) => Promise<unknown>;
    internals.query = async (...args: unknown[]) => {
      if (this.ended) return this.apart(internals, () => this.readAlone(args));
      const control = transactionControlOf(args[0]);
      if (control) throw this.refuse(control);
      // A read before the first write needs no transaction: it borrows a connection for
      // itself alone, so a handler that reads, then waits on something else, holds none while
      // it waits. A locking read (`FOR UPDATE`) opens the transaction, as its lock must last,
      // and so does any read of a transaction above READ COMMITTED, whose reads count.
      if (!this.opening && !isAboveReadCommitted(this.plannedLevel()) && isPlainRead(args[0])) {
        return this.readAlone(args);
      }
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

  /**
   * A statement of the request's runner that comes after its end (work the handler left
   * running, on a manager it held): once the end has an outcome, it runs apart if the request
   * committed, and is refused if it rolled back. One that belongs to a nested transaction
   * opened before the end is refused either way: its savepoint committed with the request,
   * and the rest of it cannot run in a transaction that is gone.
   */
  private async apart<T>(runner: RunnerInternals, work: () => Promise<T>): Promise<T> {
    if (runner.transactionDepth <= 1) return this.afterEnd(work);
    await this.ending;
    throw new TransactionEndedError(this.committed);
  }

  /** Marks the transaction as one that can only roll back; the error for its code. */
  private refuse(statement: string): TransactionControlRefusedError {
    const error = new TransactionControlRefusedError(statement);
    this.refused ??= error;
    return error;
  }

  /** The level the transaction is to begin at, as far as is known before it begins. */
  private plannedLevel(): IsolationLevel | undefined {
    const configured = this.configuredLevel();
    return this.isolationLevel ?? (isIsolationLevel(configured) ? configured : undefined);
  }

  /** TypeORM 1's option; 0.3 has none, and the server's default applies. */
  private configuredLevel(): string | undefined {
    return (this.dataSource.options as { isolationLevel?: string }).isolationLevel;
  }

  /**
   * A nested transaction asks for `level`: before the `BEGIN` went out, the request's
   * transaction begins at it (or stronger); after, it must already be at least as strong.
   * Refused (nothing sent) otherwise, never run weaker than asked.
   */
  private async askIsolation(level: string | undefined): Promise<void> {
    if (level === undefined) return;
    const decision = decideIsolation(
      level,
      this.beginning
        ? { begun: true, current: await this.currentLevel() }
        : { begun: false, planned: this.plannedLevel() },
    );
    if (decision.kind === 'refuse') throw new IsolationLevelRefusedError(decision.reason);
    if (decision.kind === 'begin-at') this.isolationLevel = decision.level;
  }

  /** The level the transaction runs at: the one sent with `BEGIN`, else the server's. */
  private async currentLevel(): Promise<IsolationLevel> {
    if (this.begunAt) return this.begunAt;
    const client = await this.opening!;
    await this.beginning;
    const { rows } = await withDeadline(
      client.query<{ level: string }>(`SELECT current_setting('transaction_isolation') AS level`),
      this.timeoutMs,
      'reading the isolation level',
    );
    const level = rows[0].level.toUpperCase();
    this.begunAt = isIsolationLevel(level) ? level : 'READ COMMITTED';
    return this.begunAt;
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
        // The connection is the request's: it goes back to the pool when the transaction
        // ends, never mid-transaction because code in it released what it was handed.
        release: { value: () => undefined },
      }) as PoolClient;
      runner.databaseConnection = guarded;
      return guarded;
    });
  }

  private send(client: PoolClient, args: unknown[]): Promise<unknown> {
    const control = transactionControlOf(
      isSubmittable(args[0]) ? (args[0] as { text?: unknown }).text : args[0],
    );
    if (control) return Promise.reject(this.refuse(control));
    const runner = this.runner as unknown as RunnerInternals;
    // Sent after the end (a statement that was on its way through TypeORM when the commit
    // began): it runs apart once the request committed, on a connection of its own.
    const apart = () =>
      isSubmittable(args[0])
        ? Promise.reject(new TransactionEndedError())
        : this.apart(runner, () => this.sendAlone(args));
    if (this.ended) return apart();
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
    const after = () => (this.ended ? apart() : query.apply(client, args));
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
    // The DataSource's option is sent as it is: a level PostgreSQL refuses fails the BEGIN.
    const isolation = this.isolationLevel ?? this.configuredLevel();
    this.begunAt = isIsolationLevel(isolation) ? isolation : undefined;
    return isolation ? `BEGIN ISOLATION LEVEL ${isolation}` : 'BEGIN';
  }

  /** One statement on a pooled connection of its own, outside any transaction. */
  private async sendAlone(args: unknown[]): Promise<unknown> {
    const client = await acquire(this.pool(), this.timeoutMs);
    try {
      const result = await (client.query as (...a: unknown[]) => Promise<unknown>).apply(
        client,
        args,
      );
      client.release();
      return result;
    } catch (error) {
      client.release(asError(error));
      throw error;
    }
  }
}

/** The members of TypeORM's PostgresQueryRunner that are set here (public, but readonly). */
interface RunnerInternals {
  isTransactionActive: boolean;
  transactionDepth: number;
  databaseConnection: unknown;
  connect(): Promise<unknown>;
  release(): Promise<void>;
  startTransaction(level?: string): Promise<void>;
  commitTransaction(): Promise<void>;
  rollbackTransaction(): Promise<void>;
  query(...args: unknown[]): Promise<unknown>;
  stream(...args: unknown[]): Promise<unknown>;
}

function isSubmittable(value: unknown): boolean {
  return typeof (value as { submit?: unknown } | null)?.submit === 'function';
}

function asError(error: unknown): Error {
  return error instanceof Error ? error : new Error(String(error));
}
