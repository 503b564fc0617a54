import {
  EFFECT_FREE_FUNCTIONS,
  noteCatalogUnread,
  noteShadowedBuiltIns,
  PLAIN_OPERATORS,
  SHADOWED_BUILT_INS_QUERY,
} from '../transaction/sql/shadowed-built-ins.js';
import { Logger } from '@nestjs/common';
import {
  type Pool,
  type PoolClient,
  type QueryConfig,
  type QueryResult,
  type QueryResultRow,
} from 'pg';
import { type DataSource, type EntityManager } from 'typeorm';
import {
  IdempotencyStoreUnavailableError,
  PermanentDatabaseError,
} from '../shapes/idempotency.errors.js';
import { type PoolerMode } from '../shapes/idempotency-options.interface.js';
import {
  isAboveReadCommitted,
  isIsolationLevel,
  type IsolationLevel,
} from '../transaction/isolation-level.js';
import { type RequestTransaction } from '../transaction/request-transaction.js';
import { type DataLayer, runInOwnTransaction, typeOrmDataLayer } from './data-layer.js';
import { acquire, queryWithDeadline } from '../connection/deadline.js';
import { misconfigured } from '../connection/pooler-misfit.js';
import {
  adaptedToPooler,
  effectivePooler,
  noneBehindPooler,
  poolerSignature,
  probesForPooler,
  type SessionIds,
} from '../connection/pooler-signature.js';
import { isPermanentError, isReadOnlyError } from '../connection/connection-errors.js';
import { libraryStatement } from '../connection/library-path.js';
import { permanentRemedy } from '../connection/permanent-remedy.js';
import { readyNow } from './ready-now.js';
import {
  READ_ONLY_PROBE,
  readOnlyExplanation,
  readOnlyLasts,
  type ReadOnlySession,
} from '../connection/read-only-session.js';
import {
  PURGE_MESSAGE_FAILURES_BATCH,
  PURGE_PROCESSED_BATCH,
  RECORD_MESSAGE_FAILURE,
} from '../claim/postgres-statements.js';
import { type Statement, type StoreDatabase } from '../shapes/store-database.js';
export { type Statement } from '../shapes/store-database.js';

/** The level a transaction begun without one runs at, on this database and role. */
/**
 * The server's default level, and what the app's database shadows of the built-ins a plain
 * read may call (see `shadowed-built-ins.ts`), in one statement.
 */
const SERVER_LEVEL = `SELECT current_setting('default_transaction_isolation') AS level`;
/** The library's own statement's transaction, on a database whose default is above it. */
const BEGIN_READ_COMMITTED = 'BEGIN ISOLATION LEVEL READ COMMITTED';

/** What `ready()` answers once nothing is left to wait for: one promise, made once. */
const READY: Promise<void> = Promise.resolve();

/**
 * The app's own PostgreSQL, as the library uses it whatever its claim store: the request's
 * transaction that the handler's effects join, plain transactions for phases of keyless
 * requests, and the consumers' tables. The hot path speaks to pg directly rather than through
 * TypeORM's query runner: one prepared statement per step and no ORM hydration, which is where
 * a request's CPU went.
 */
export class IdempotencyDatabase implements StoreDatabase {
  private readonly logger = new Logger('Idempotency');

  constructor(
    /** The app's data layer; a function giving a TypeORM DataSource stands for TypeORM's. */
    layer: DataLayer | (() => DataSource),
    readonly timeoutMs: number,
    /**
     * `'transaction'`: the connection's server session may change between transactions (a
     * pooler in transaction mode), so nothing is left on it: statements are sent unnamed
     * (parsed each time, rather than prepared once per session), and maintenance keeps its
     * locks and settings to one transaction. Undefined: asked of the first connection (see
     * `probePooler`), and adapted to.
     */
    readonly configuredPooler?: PoolerMode,
  ) {
    this.layer = typeof layer === 'function' ? typeOrmDataLayer(layer) : layer;
  }

  private readonly layer: DataLayer;

  /** What the probe saw, once it could ask: a pooler, or PostgreSQL itself. */
  private seen?: { verdict: 'direct' | 'pooler'; ids: SessionIds };
  private probing?: Promise<void>;

  /**
   * The mode in use: the one set, or the one the probe found (see `effectivePooler`). Read at
   * each use, as it is known only once the database was reached.
   */
  get pooler(): PoolerMode {
    return effectivePooler(this.configuredPooler, this.seen?.verdict);
  }

  /**
   * Asks one connection whether a pooler stands between the app and PostgreSQL (see
   * `poolerSignature`): one statement, once; again on the next call while the database could
   * not be reached. Never throws: a failure leaves the question open (the safe mode meanwhile),
   * and the caller's own statement meets the outage. Says once what it adapted to.
   */
  async probePooler(): Promise<void> {
    if (this.seen || !probesForPooler(this.configuredPooler)) return;
    this.probing ??= this.askForPooler().finally(() => (this.probing = undefined));
    return this.probing;
  }

  /** Why the app must not start: `pooler: 'none'` set, and a pooler seen; else undefined. */
  poolerRefusal(): string | undefined {
    if (this.configuredPooler !== 'none' || this.seen?.verdict !== 'pooler') return undefined;
    return noneBehindPooler(this.seen.ids);
  }

  private async askForPooler(): Promise<void> {
    let ids: SessionIds;
    try {
      ids = await this.withConnection(async (client) => {
        const { rows } = await queryWithDeadline<{ pid: number }>(
          client,
          { text: 'SELECT pg_backend_pid() AS pid' },
          this.timeoutMs,
        );
        const { processID } = client as PoolClient & { processID?: number | null };
        return { announced: processID ?? undefined, backend: rows[0].pid };
      });
    } catch {
      return;
    }
    const verdict = poolerSignature(ids);
    this.seen = { verdict, ids };
    if (verdict === 'direct') return;
    if (this.configuredPooler === 'none') this.logger.error(noneBehindPooler(ids));
    else this.logger.log(adaptedToPooler(ids));
  }

  /**
   * The schema check, until it has once found the schema complete: run before the library's
   * statements (the database was down at start-up, so the check runs on first contact).
   */
  private schemaCheck?: () => Promise<void>;
  private checking?: Promise<void>;

  /**
   * Runs `check` before the next statements until it resolves once. It rejects (with the
   * library's 500) while the schema is incomplete, so requests are refused with what to do,
   * and runs again on the next statement: a schema migrated meanwhile is found without a
   * restart. A check that could not reach the database resolves without passing, and the
   * statement meets the outage itself.
   */
  checkSchemaFirst(check: () => Promise<boolean>): void {
    this.schemaCheck = async () => {
      if (await check()) this.schemaCheck = undefined;
    };
  }

  /**
   * Once the pooler is known (or could not be asked), the schema check (if any is pending) has
   * passed, and the server's default isolation level was read (tried alongside them until it
   * once succeeds); concurrent callers share one run of each.
   */
  ready(): Promise<void> {
    const now = readyNow({
      poolerKnown: this.seen !== undefined || !probesForPooler(this.configuredPooler),
      levelKnown: this.serverLevel !== undefined,
      schemaCheckPending: this.schemaCheck !== undefined || this.checking !== undefined,
    });
    return now ? READY : this.becomeReady();
  }

  /** `ready()` while something is left to wait for. */
  private async becomeReady(): Promise<void> {
    // Side by side: each is bounded by the deadline, and a database that does not answer
    // should delay the statement by one deadline, not three.
    const probe = this.seen ? undefined : this.probePooler();
    const learning = this.serverLevel === undefined ? this.learnServerLevel() : undefined;
    if (this.schemaCheck) {
      this.checking ??= this.schemaCheck().finally(() => (this.checking = undefined));
    }
    await Promise.all([probe, this.checking, learning]);
  }

  /**
   * The level a transaction begun without one runs at (`default_transaction_isolation` of the
   * database, role or connection), once read; every request's transaction is told (see
   * `RequestTransaction.serverLevel`).
   */
  private serverLevel?: IsolationLevel;
  private learningLevel?: Promise<void>;

  /** Reads the server's default level; never fails (a database that is down is met later). */
  private learnServerLevel(): Promise<void> {
    this.learningLevel ??= this.withConnection(async (client) => {
      const { rows } = await queryWithDeadline<{ level: string }>(
        client,
        { text: SERVER_LEVEL },
        this.timeoutMs,
      );
      // What of the app's a plain read may reach unnamed: a statement of its own, so that a
      // catalog the app's role may not read (pg_proc revoked) fails it alone.
      try {
        const shadowed = await queryWithDeadline<{
          functions: string[];
          operators: string[];
          relations: string[];
          types: string[];
          columns: string[];
          deferrable: boolean;
        }>(
          client,
          { text: SHADOWED_BUILT_INS_QUERY, values: [EFFECT_FREE_FUNCTIONS, PLAIN_OPERATORS] },
          this.timeoutMs,
        );
        if (shadowed.rows[0]) noteShadowedBuiltIns(shadowed.rows[0]);
      } catch (error) {
        if (!isPermanentError(error)) throw error;
        // Not to be read: no read runs apart, each opens the request's transaction (correct,
        // only less lazy), and the operator is told once why.
        noteCatalogUnread();
        this.logger.warn(
          "the catalog of the app's functions, views and types could not be read " +
            `(${String(error)}): every read in an idempotent request runs in its transaction. ` +
            'GRANT SELECT ON pg_catalog.pg_proc TO the app’s role to let plain reads run apart.',
        );
      }
      return rows;
    })
      .then((rows) => {
        const level = rows[0]?.level.toUpperCase();
        this.serverLevel = isIsolationLevel(level) ? level : 'READ COMMITTED';
      })
      .catch(() => undefined)
      .finally(() => (this.learningLevel = undefined));
    return this.learningLevel;
  }

  /** Whether statements are prepared once per session under their names. */
  get namedStatements(): boolean {
    return this.pooler !== 'transaction';
  }

  /**
   * A request's transaction, opened by its first statement. `joinable`: code in its scope
   * that asks the DataSource for a runner (repositories, `dataSource.query()`) joins it.
   */
  transaction(joinable: boolean): RequestTransaction {
    const transaction = this.layer.transaction(this.timeoutMs, joinable, this.namedStatements);
    transaction.serverLevelNow = () => this.serverLevel;
    transaction.libraryPathNow = () => this.libraryPath;
    return transaction;
  }

  /**
   * The search path the start-up check found the library's tables through (the session's
   * `search_path` of its connection), once it passed: every statement of the library's runs
   * with it (`pinSearchPath` in its round trip), whatever a session's path is when the library
   * gets the connection. A schema-per-tenant app's `SET search_path TO tenant_x` on a runner
   * it gives back without a reset would otherwise send the library's unqualified statements to
   * the tenant's schema: a key claimed in its copy of `idempotency_keys`, unseen by a retry on
   * another connection (the handler runs twice), or a 500 where the schema has none.
   */
  private libraryPath?: string;

  /** See `libraryPath`: for maintenance on a connection of its own. */
  libraryPathNow(): string | undefined {
    return this.libraryPath;
  }

  /** Kept by the start-up check once it passed (see `libraryPath`). */
  pinLibraryPath(path: string, messagesSchema?: string): void {
    this.libraryPath = path;
    this.messagesIn = messagesSchema;
  }

  /** The schema of `processed_messages` under the library's path, once the check found it. */
  private messagesIn?: string;

  /** See `messagesIn`: a delivery's record names its table in it (see `inMessagesSchema`). */
  messagesSchema(): string | undefined {
    return this.messagesIn;
  }

  /**
   * Runs `work` in a plain transaction: a consumer's delivery, phases of a request that has no
   * key. It begins at the server's default level as a request's does (reads before the first
   * write join it above READ COMMITTED).
   */
  runInTransaction<T>(work: (manager: EntityManager) => Promise<T>): Promise<T> {
    const transaction = this.layer.transaction(this.timeoutMs, true, false);
    transaction.serverLevelNow = () => this.serverLevel;
    transaction.libraryPathNow = () => this.libraryPath;
    return runInOwnTransaction(transaction, work);
  }

  /** Deletes up to `batchSize` consumers' message ids processed before `retentionMs`. */
  async purgeProcessedBatch(retentionMs: number, batchSize: number): Promise<number> {
    const { rowCount } = await this.query(PURGE_PROCESSED_BATCH, [retentionMs, batchSize]);
    return rowCount ?? 0;
  }

  /** Deletes up to `batchSize` failure counts last updated before `retentionMs`. */
  async purgeMessageFailuresBatch(retentionMs: number, batchSize: number): Promise<number> {
    const { rowCount } = await this.query(PURGE_MESSAGE_FAILURES_BATCH, [retentionMs, batchSize]);
    return rowCount ?? 0;
  }

  /** Counts one more failed delivery of a consumer's message; returns the count. */
  async recordMessageFailure(consumer: string, messageId: string, error: string): Promise<number> {
    const { rows } = await this.query<{ attempts: number }>(RECORD_MESSAGE_FAILURE, [
      consumer,
      messageId,
      error.slice(0, 1000),
    ]);
    return rows[0].attempts;
  }

  /**
   * Every call is bounded, the wait for a connection included: a pool waiting for a database
   * that does not answer would otherwise hold the request forever. A statement still running
   * when the time is up is cancelled on the server, and a connection that arrives after it is
   * given back unused, so that nothing runs once the client was told 503. Any failure is a 503,
   * but for a pooler's misfit, which lasts: a 500 (`store_misconfigured`) that logs what to
   * change.
   *
   * `late`: the statement's answer when it comes after its deadline, once its caller was told
   * 503 (see `queryWithDeadline`), for the caller to undo what it did.
   */
  async query<R extends QueryResultRow>(
    statement: Statement,
    values: unknown[],
    late?: (result: QueryResult<R>) => void,
  ): Promise<QueryResult<R>> {
    const config: QueryConfig = {
      name: this.namedStatements ? statement.name : undefined,
      text: statement.text,
      values,
    };
    await this.ready();
    // Above READ COMMITTED by default (the database's or role's `default_transaction_isolation`),
    // the library's own statement would run at that level in autocommit: claims and give-backs
    // of unrelated keys, which share the pages of the keys' index, then fail to serialize
    // against each other (503s under a burst of new keys). Its bookkeeping needs no more than
    // READ COMMITTED, which a transaction of its own names, for two more round trips on such a
    // database only.
    const named = isAboveReadCommitted(this.serverLevel);
    try {
      return await this.withConnection(async (client) => {
        if (named) await queryWithDeadline(client, { text: BEGIN_READ_COMMITTED }, this.timeoutMs);
        // The library's search path set in the statement's own round trip, for its
        // transaction alone (the implicit one up to the Sync, or the one named above).
        const result = await libraryStatement<R>(client, config, this.timeoutMs, this.libraryPath, {
          late: named ? undefined : late,
        }).catch(async (error: unknown) => {
          throw await this.lastingReadOnly(client, error);
        });
        // Its COMMIT answered past the deadline has committed what the statement did (a key
        // claimed, after its caller was told 503): handed to `late` as the statement's own
        // answer would be in autocommit, for the caller to undo; cancelled meanwhile, as a
        // bookkeeping statement is (a claim is no answer a standby must hold).
        if (named) {
          await queryWithDeadline(client, { text: 'COMMIT' }, this.timeoutMs, {
            late: late && (() => late(result)),
          });
        }
        return result;
      });
    } catch (error) {
      throw this.failureOf(error, statement.name);
    }
  }

  /**
   * What a store statement's failure is to its caller (logged here): a pooler misfit, a
   * lasting refusal that says what to fix, or the store unavailable (a 503).
   */
  failureOf(error: unknown, what: string): Error {
    const misfit = misconfigured(error);
    if (misfit) return misfit;
    this.logger.error(`idempotency store call ${what} failed: ${String(error)}`);
    if (error instanceof PermanentDatabaseError) {
      this.logger.error(error.explanation);
      return error;
    }
    // A missing table, column or function, or a privilege: no retry passes until it is fixed.
    if (isPermanentError(error)) {
      const explained = new PermanentDatabaseError(error, permanentRemedy(error));
      this.logger.error(explained.explanation);
      return explained;
    }
    return new IdempotencyStoreUnavailableError(error);
  }

  /**
   * A write refused as read-only (25006), asked of the session that refused it: the library's
   * 500 when the app's own settings make every session read-only on a primary (see
   * `readOnlyLasts`), else the error as it is (a 503: a standby or a fenced node in a failover
   * may become writable). Any failure of the question leaves the error as it is.
   */
  private async lastingReadOnly(client: PoolClient, error: unknown): Promise<unknown> {
    if (!isReadOnlyError(error)) return error;
    try {
      const { rows } = await queryWithDeadline<ReadOnlySession>(
        client,
        { text: READ_ONLY_PROBE },
        this.timeoutMs,
      );
      const session = rows[0];
      if (session && readOnlyLasts(session)) {
        return new PermanentDatabaseError(error, readOnlyExplanation(session));
      }
    } catch {
      // The session failed the question too: nothing is known, so nothing is called lasting.
    }
    return error;
  }

  /**
   * Runs `work` on one connection of the app's pool, for maintenance that needs a session of
   * its own: a session-level lock, a statement that cannot run in a transaction block (behind
   * a pooler in transaction mode, `pooler` says so, the session lasts one transaction). Only
   * the wait for the connection is bounded here; `work` bounds its statements itself. When
   * `work` fails the connection is closed rather than pooled, so that nothing it set on the
   * session reaches the app's queries.
   */
  async withConnection<T>(work: (client: PoolClient) => Promise<T>): Promise<T> {
    const client = await acquire(this.pool, this.timeoutMs);
    try {
      const result = await work(client);
      client.release();
      return result;
    } catch (error) {
      client.release(error instanceof Error ? error : new Error(String(error)));
      throw error;
    }
  }

  /** The app's pool; read on each call, as TypeORM may reconnect. */
  private get pool(): Pool {
    return this.layer.pool();
  }
}
