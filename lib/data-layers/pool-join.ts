import { type Pool, type PoolClient } from 'pg';
import { keepOwnConnect } from '../connection/own-connection.js';
import { connectWithin } from '../transaction/bounded-connect.js';
import { transactionScope } from '../transaction/transaction-scope.js';
import { retriedTryRefusal } from '../transaction/handler-try.js';
import { watchCancels } from './cancel-watch.js';
import { noteClientsHandedOut, watchClientsBeside } from './client-beside.js';
import { noteTaken, watchTakenClients } from './client-taken.js';

type Callback = (...results: unknown[]) => void;

/** Set while the pool's own `query()` runs: the `connect()` it makes is not the app's. */
let inPoolQuery = false;

/**
 * Makes `pool.query()` and `pool.connect()` join the transaction of the scope they are called
 * in (an idempotent request's, or a phase's), so that a data layer built on the pool (Prisma
 * with `@prisma/adapter-pg`, Drizzle on node-postgres, Kysely's `PostgresDialect`) writes in it
 * without a client threaded through its calls: a query runs on the request's connection, and a
 * connection taken from the pool is a view of it, whose `BEGIN` is a savepoint. Outside a scope
 * the pool behaves as it always did. Installed once per pool, by the library; the pool stays
 * the same object (data layers check `instanceof Pool`).
 */
export function joinTransactionsOfPool(pool: Pool): void {
  if (!keepOwnConnect(pool)) return;
  // The class before `watchCancels` makes its subclass: the one `new pg.Client()` makes.
  watchClientsBeside((pool as unknown as { Client?: unknown }).Client);
  noteClientsHandedOut(pool);
  watchCancels(pool);
  watchTakenClients(pool);
  watchOtherPools(Object.getPrototypeOf(pool) as PoolMethods);
  const connect = pool.connect as (...args: unknown[]) => unknown;
  const query = pool.query as (...args: unknown[]) => unknown;
  const joined = (self: unknown) => transactionScope.getStore()?.joinedPool?.(self as object);
  (pool as unknown as { connect: unknown }).connect = function joiningConnect(
    this: Pool,
    ...args: unknown[]
  ): unknown {
    const callback = typeof args[0] === 'function' ? (args[0] as Callback) : undefined;
    const refused = retriedTryRefusal();
    if (refused) return callback ? void callback(refused) : Promise.reject(refused);
    const join = joined(this);
    if (!join) {
      // The pool's own `query()` taking a client for one statement: sent in its callback,
      // which pg-pool may call from whoever gave a client back (another request's context),
      // it is the caller's statement, never judged (`noteTaken`).
      if (inPoolQuery) return connect.apply(this, args);
      // A client of its own: noted with the scope it was taken in (`noteTaken`), so that its
      // statements sent from a request or phase it is not the scope of are refused.
      const scope = transactionScope.getStore();
      const noted = (client: PoolClient) => {
        noteTaken(this, client, scope);
        return client;
      };
      const deadline = scope?.connectDeadline?.(this);
      if (deadline === undefined) {
        if (!callback) return (connect.apply(this, args) as Promise<PoolClient>).then(noted);
        return connect.call(this, (error: unknown, client?: PoolClient, done?: unknown) => {
          if (client) noted(client);
          callback(error, client, done);
        });
      }
      return connectWithin(
        this,
        () => (connect.call(this) as Promise<PoolClient>).then(noted),
        deadline,
        callback,
      );
    }
    const client = join.connect();
    if (!callback) return client;
    client.then(
      (view) => callback(undefined, view, (error?: Error | boolean) => view.release(error)),
      (error: unknown) => callback(error),
    );
    return undefined;
  };
  (pool as unknown as { query: unknown }).query = function joiningQuery(
    this: Pool,
    ...args: unknown[]
  ): unknown {
    const last = args[args.length - 1];
    const callback = typeof last === 'function' ? (last as Callback) : undefined;
    const refused = retriedTryRefusal();
    if (refused) return callback ? void callback(refused) : Promise.reject(refused);
    const join = joined(this);
    if (!join) {
      // pg-pool's `query()` calls `connect()` before it returns (see `inPoolQuery`).
      inPoolQuery = true;
      try {
        return query.apply(this, args);
      } finally {
        inPoolQuery = false;
      }
    }
    const result = join.query(callback ? args.slice(0, -1) : args);
    if (!callback) return result;
    result.then(
      (value) => callback(undefined, value),
      (error: unknown) => callback(error),
    );
    return undefined;
  };
}

interface PoolMethods {
  connect(...args: unknown[]): unknown;
  query(...args: unknown[]): unknown;
}

const watched = new WeakSet<object>();

/**
 * Tells the transaction of the scope about every other pool of the same class used in it
 * (`otherPool`): a data layer built on a pool of its own (`new PrismaPg({ connectionString })`
 * makes one) commits apart from the request, and a retry runs its writes again. That is said at
 * its first call, never silently. The joined pool's own methods come here too, and are told
 * apart by the transaction.
 */
function watchOtherPools(methods: PoolMethods): void {
  if (watched.has(methods)) return;
  watched.add(methods);
  const { connect, query } = methods;
  methods.connect = function watchedConnect(this: object, ...args: unknown[]): unknown {
    noteClientsHandedOut(this);
    transactionScope.getStore()?.otherPool?.(this);
    return connect.apply(this, args);
  };
  methods.query = function watchedQuery(this: object, ...args: unknown[]): unknown {
    transactionScope.getStore()?.otherPool?.(this);
    return query.apply(this, args);
  };
}
