import { type DataSource, type QueryRunner, type ReplicationMode } from 'typeorm';
import { type PoolClient } from 'pg';
import { type CancelAsked } from '../connection/cancel-asked.js';
import { optionalRequire } from '../connection/optional-require.js';
import { IdempotencyRunnerConnectedOutsideRequestError } from '../shapes/idempotency.errors.js';
import { protectSaves } from './own-persist.js';
import { refuseRetriedTry } from './handler-try.js';
import { placeOfRunner, type RunnerHeld, type RunnerScope } from './runner-place.js';
import { RunnerConnectedOutsideRequestError, SessionSetBeforeHandlerError } from './seam-errors.js';
import { setsForTransaction } from './sql/sql-text.js';
import { FrameSlotStorage } from './request-frame.js';

/** What a transaction makes of a joined pool's `query()` and `connect()` in its scope. */
export interface PoolJoin {
  query(args: unknown[]): Promise<unknown>;
  connect(): Promise<PoolClient>;
}

/**
 * A transaction that code running in its scope joins, through the data layer it writes with:
 * TypeORM asks the DataSource for a runner; Prisma, Drizzle and Kysely ask their node-postgres
 * pool for a connection or a query.
 */
export interface JoinableTransaction {
  /**
   * The runner to hand out to `dataSource` for `mode`, or undefined to let it make a plain
   * one (another DataSource, or a transaction that is not joinable).
   */
  joinedRunner?(dataSource: DataSource, mode: ReplicationMode): QueryRunner | undefined;
  /**
   * A view of its open transaction's runner for `dataSource`, for a runner made elsewhere
   * (outside any scope, or in another request's) and used in this scope; undefined when it
   * has none to offer (ended, not joinable, another DataSource): the runner is then its own.
   */
  openRunner?(dataSource: DataSource): QueryRunner | undefined;
  /**
   * For a runner made elsewhere and first used in its scope after its end (work the request
   * left running): a runner of `dataSource`'s own whose connection waits for the end's outcome,
   * apart once committed, refused after a rollback; undefined while open, or not joinable.
   */
  runnerPastEnd?(dataSource: DataSource): QueryRunner | undefined;
  /**
   * A statement of a runner connected outside it was refused (`placeOfRunner`'s `refuse`): the
   * transaction, if still open, can then only roll back, as after any refusal of the seam's.
   */
  refuseRunner?(error: RunnerConnectedOutsideRequestError): void;
  /**
   * How it stands to a runner of `dataSource` made elsewhere and used in its scope (see
   * `placeOfRunner`); none given: `apart`.
   */
  runnerScope?(dataSource: DataSource): Exclude<RunnerScope, 'none'>;
  /** What `pool.query()` and `pool.connect()` of `pool` do in the scope; undefined: as always. */
  joinedPool?(pool: object): PoolJoin | undefined;
  /**
   * How it stands to a client of `pool` taken in another scope (see `placeOfClient`): `open`,
   * its statements of that pool join it; `ended`, they did until it ended; undefined: they
   * never join it (another pool, a route not atomic, `outside()`).
   */
  poolScope?(pool: object): 'open' | 'ended' | undefined;
  /** A view of its connection for a view of `pool` taken in another scope (`placeOfClient`). */
  standInOf?(pool: object): PoolClient | undefined;
  /** Whether it is the scope of `IdempotentTransaction.outside()` left from `scope`. */
  leftFrom?(scope: JoinableTransaction): boolean;
  /** A pool of the same class as the joined one was used in the scope (see `watchOtherPools`). */
  otherPool?(pool: object): void;
  /** How long a connection of `pool` may be waited for in the scope (see `OutsideScope`). */
  connectDeadline?(pool: object): number | undefined;
  /**
   * Code in the scope asked PostgreSQL to cancel or end a backend (see `watchCancels`): noted
   * on the transaction's connection if that backend is its own.
   */
  cancelAsked?(asked: CancelAsked): void;
}

/**
 * The transaction of the work running now: the request's (an `@Idempotent()` handler) or a
 * phase's. Kept apart from the request's context because a phase runs inside the request
 * yet joins a transaction of its own. A slot of the library's one frame (see `request-frame.ts`).
 */
export const transactionScope = new FrameSlotStorage<JoinableTransaction>('scope');

const ownRunners = new WeakMap<DataSource, DataSource['createQueryRunner']>();

/**
 * Makes every query runner the DataSource creates inside a transaction's scope that
 * transaction's runner (a view of it: see `runnerView`). TypeORM makes one for each repository call, `dataSource.query()`,
 * `dataSource.transaction()` and query builder without a runner of its own, so a handler's
 * ordinary code (a repository injected with `@InjectRepository`, a service using
 * `@nestjs-cls/transactional`, a `dataSource.transaction()` that then nests as a savepoint)
 * writes in the request's transaction without passing a manager around. Outside a scope the
 * DataSource behaves as it always did. Installed once per DataSource, by the library.
 */
export function joinTransactionsOf(dataSource: DataSource): void {
  if (ownRunners.has(dataSource)) return;
  // TypeORM's own, not the early hook's (`joiningFromTheStart`): a runner of the library's own
  // (`ownQueryRunner`) is never a view, and a joined runner is wrapped once.
  const current = dataSource.createQueryRunner;
  const own = current === early?.hook ? early.own : current;
  ownRunners.set(dataSource, own);
  earlyRegistry().joined.add(dataSource);
  // Its saves: one outside a nested transaction opens its own (a savepoint).
  protectSaves(dataSource.manager, () => transactionScope.getStore());
  dataSource.createQueryRunner = function joiningCreateQueryRunner(
    this: DataSource,
    mode: ReplicationMode = 'master',
  ): QueryRunner {
    refuseRetriedTry();
    const store = transactionScope.getStore();
    if (store) {
      const joined = store.joinedRunner?.(this, mode);
      if (joined) return joined;
      // Made before the handler started (an interceptor of the app's written above
      // `@Idempotent()`, a pipe): its transaction is not joinable yet. Joins once it is, as one
      // made outside every scope does (adversary 90: a failed try's row committed on its own).
      const runner = own.call(this, mode);
      return store.runnerScope?.(this) === 'later' ? joiningWhereUsed(this, runner) : runner;
    }
    // Made outside any scope (a `Scope.REQUEST` provider's runner, made as Nest builds it,
    // before `@Idempotent()` enters the request's scope): joins the scope it is used in.
    return joiningWhereUsed(this, own.call(this, mode));
  };
}

/** What the early hook keeps of every copy of the library loaded (one in an app). */
interface EarlyRegistry {
  /** DataSources some copy joined (`joinTransactionsOf`): their runners are its own. */
  joined: WeakSet<DataSource>;
  /** The wrapper of the copy loaded last, for a runner made before any copy joined its DataSource. */
  wrap?: (dataSource: DataSource, runner: QueryRunner) => QueryRunner;
}

const EARLY = Symbol.for('nestjs-idempotency-pg.early-runners');

function earlyRegistry(): EarlyRegistry {
  const global = globalThis as { [EARLY]?: EarlyRegistry };
  return (global[EARLY] ??= { joined: new WeakSet() });
}

/**
 * TypeORM's `DataSource.prototype.createQueryRunner`, hooked as the library is loaded (before
 * the app's module builds a provider): a runner a PostgreSQL DataSource makes before the library
 * found it (`IdempotencyDataSource` does so once every provider exists) is one
 * `joiningWhereUsed` stands for, as one made after is: a singleton's
 * `this.runner = dataSource.createQueryRunner()` in its constructor joins the request it is used
 * in, not written apart (adversary 98: a failed try's row committed on its own, and its retry
 * wrote it again). A DataSource the library never joins keeps plain behaviour: its runners'
 * stand-ins are the runner itself, in and outside every scope. Undefined without TypeORM (an
 * app on Prisma, Drizzle, Kysely), or if its class has no such method.
 */
const early = joiningFromTheStart();

function joiningFromTheStart():
  { hook: DataSource['createQueryRunner']; own: DataSource['createQueryRunner'] } | undefined {
  const registry = earlyRegistry();
  registry.wrap = (dataSource, runner) => joiningWhereUsed(dataSource, runner);
  const typeorm = optionalRequire<{ DataSource?: { prototype: DataSource } }>('typeorm');
  const prototype = typeorm?.DataSource?.prototype as
    | (DataSource & {
        [EARLY]?: { hook: DataSource['createQueryRunner']; own: DataSource['createQueryRunner'] };
      })
    | undefined;
  if (!prototype || typeof prototype.createQueryRunner !== 'function') return undefined;
  // Hooked once per TypeORM, whichever copy of the library came first.
  if (prototype[EARLY]) return prototype[EARLY];
  const own = prototype.createQueryRunner;
  const hook = function earlyCreateQueryRunner(
    this: DataSource,
    mode: ReplicationMode = 'master',
  ): QueryRunner {
    const runner = own.call(this, mode);
    if (registry.joined.has(this) || this.options?.type !== 'postgres' || !registry.wrap) {
      return runner;
    }
    return registry.wrap(this, runner);
  };
  Object.defineProperty(prototype, EARLY, { value: { hook, own } });
  prototype.createQueryRunner = hook;
  return { hook, own };
}

/**
 * A runner made outside every transaction scope (or before its scope's transaction was
 * joinable), which stands for a view of the open transaction of the scope it is used in
 * (`openRunner`), one per scope, from its first use there: a unit of work made in a
 * request-scoped provider's constructor writes in the request's transaction, as one made in the
 * handler does, not on its own (adversary 88: a failed try's row committed, and the retry wrote
 * it again). One with a transaction of its own open stays itself. One with a connection of its
 * own taken outside (a guard's read, its `SET search_path`) has every statement refused in the
 * request, open or ended (`RunnerConnectedOutsideRequestError`): its session is its connection's,
 * and no place keeps what its statements mean; only its own `release()` runs, giving that
 * connection back (see `placeOfRunner`). Outside any scope it is the runner it always was.
 */
function joiningWhereUsed(dataSource: DataSource, runner: QueryRunner): QueryRunner {
  const joined = new WeakMap<JoinableTransaction, QueryRunner>();
  const elsewhere = (): QueryRunner | undefined => {
    const store = transactionScope.getStore();
    // Made before the library found its DataSource (`joiningFromTheStart`): itself, until then.
    if (!store || !ownRunners.has(dataSource)) return undefined;
    const known = joined.get(store);
    if (known) return known;
    switch (placeOfRunner(heldBy(runner), store.runnerScope?.(dataSource) ?? 'apart')) {
      case 'join': {
        const view = store.openRunner?.(dataSource);
        if (view) joined.set(store, view);
        return view;
      }
      case 'refuse': {
        // One per scope: its `release()` goes to the runner itself.
        const refusing = refusingStatements(runner, standing, store);
        joined.set(store, refusing);
        return refusing;
      }
      case 'after-end': {
        // One per scope: its later statements and its `release()` go to the same runner.
        const past = store.runnerPastEnd?.(dataSource);
        if (past) joined.set(store, past);
        return past;
      }
      case 'itself':
        return undefined;
    }
  };
  const standing: QueryRunner = new Proxy(runner, {
    get(target, property, receiver) {
      const view = elsewhere();
      if (!view) {
        const value = Reflect.get(target, property, receiver) as unknown;
        return property === 'query' && typeof value === 'function'
          ? refusingSessionSetsBeforeHandler(dataSource, target, value as QueryRunner['query'])
          : value;
      }
      const value = Reflect.get(view, property) as unknown;
      return typeof value === 'function' && property !== 'constructor'
        ? (value as (...args: unknown[]) => unknown).bind(view)
        : value;
    },
    set(target, property, value, receiver) {
      const view = elsewhere();
      return view
        ? Reflect.set(view, property, value)
        : Reflect.set(target, property, value, receiver);
    },
  });
  // Its manager (kept by its code: `get manager() { return this.runner.manager }`, or taken
  // in the provider's constructor) runs on it, not on the runner underneath.
  // Its broadcaster too: its subscribers get it as `event.queryRunner`, as TypeORM hands
  // them the runner its code holds.
  const broadcaster = (
    runner as unknown as { broadcaster?: { constructor: new (r: unknown) => object } }
  ).broadcaster;
  Object.assign(runner, {
    manager: dataSource.createEntityManager(standing),
    ...(broadcaster ? { broadcaster: new broadcaster.constructor(standing) } : {}),
  });
  return standing;
}

/**
 * `query` of a runner that stands for itself now: in a request's scope before its handler
 * started (an interceptor bound inside `@Idempotent()`, a pipe: `later`), a statement that sets
 * something for its transaction only (`SET LOCAL search_path`, `set_config('app.tenant', …,
 * true)`) is refused (`SessionSetBeforeHandlerError`), the request with it: there the request's
 * transaction is not joined yet, so it would run in autocommit on a connection of its own, where
 * PostgreSQL only warns and forgets it, and the handler's statements would run without it (on
 * another tenant's tables: adversary 98). Inside a transaction of the runner's own it lasts as
 * its code means, and runs. Anything else, and anywhere else, runs as it is.
 */
function refusingSessionSetsBeforeHandler(
  dataSource: DataSource,
  runner: QueryRunner,
  query: QueryRunner['query'],
): QueryRunner['query'] {
  return function query_(this: unknown, ...args: Parameters<QueryRunner['query']>) {
    const store = transactionScope.getStore();
    if (
      store &&
      ownRunners.has(dataSource) &&
      // In a transaction of its own (its code's `startTransaction()`, `manager.transaction()`)
      // the setting lasts as its code means: that transaction's.
      !runner.isTransactionActive &&
      store.runnerScope?.(dataSource) === 'later' &&
      setsForTransaction(args[0], Array.isArray(args[1]) ? args[1] : undefined)
    ) {
      const error = new SessionSetBeforeHandlerError();
      store.refuseRunner?.(error);
      // Already the answer's error: thrown before the handler, it reaches the library's edge
      // as a failure of a guard, pipe or interceptor, which answers only the library's own
      // errors (and gives the key back), never a seam's.
      return Promise.reject(new IdempotencyRunnerConnectedOutsideRequestError(error));
    }
    return query.apply(this, args);
  } as QueryRunner['query'];
}

/** What sends a statement on a runner (`refusingStatements`). */
const SENDING = new Set<PropertyKey>(['query', 'stream', 'startTransaction', 'connect']);

/**
 * `runner` (connected outside the scope, its session set up there) used in its request, open or
 * ended (`placeOfRunner`'s `refuse`): every statement it would send is refused, whichever of its
 * methods sends it, since its helpers (`clearTable`, `sql`, its manager's and repositories')
 * call them on it, not on the runner underneath; the request then rolls back. Its `release()`
 * gives its own connection back at once, through the runner TypeORM knows (`standing`), outside
 * the scope so that it reads the runner itself.
 */
function refusingStatements(
  runner: QueryRunner,
  standing: QueryRunner,
  store: JoinableTransaction,
): QueryRunner {
  const refusing: QueryRunner = new Proxy(runner, {
    get(target, property) {
      // Its node-postgres client (a `COPY` stream's, a `LISTEN`'s): the connection taken
      // outside, whose statements would commit apart as its own do (adversary 98). Refused as
      // they are, at the read: nothing of that connection is handed out in the request.
      if (property === 'databaseConnection') {
        const error = new RunnerConnectedOutsideRequestError();
        store.refuseRunner?.(error);
        throw error;
      }
      const value = Reflect.get(target, property, refusing) as unknown;
      if (typeof value !== 'function' || property === 'constructor') return value;
      const call = value as (...args: unknown[]) => unknown;
      if (SENDING.has(property)) {
        return () => {
          const error = new RunnerConnectedOutsideRequestError();
          store.refuseRunner?.(error);
          return Promise.reject(error);
        };
      }
      if (property === 'release') return () => transactionScope.exit(() => standing.release());
      return call.bind(refusing);
    },
  });
  return refusing;
}

/** What `runner` holds of its own now (see `placeOfRunner`): read at each use, two fields. */
function heldBy(runner: QueryRunner): RunnerHeld {
  if (runner.isTransactionActive) return 'own-transaction';
  const connection = (runner as unknown as { databaseConnection?: unknown }).databaseConnection;
  // Released or not: its `release()` reads it again midway, and must stay on itself.
  return connection !== undefined ? 'connected' : 'plain';
}

/** A runner of the DataSource's own, never joined: for the library's own transactions. */
export function ownQueryRunner(dataSource: DataSource): QueryRunner {
  return (ownRunners.get(dataSource) ?? dataSource.createQueryRunner).call(dataSource, 'master');
}
