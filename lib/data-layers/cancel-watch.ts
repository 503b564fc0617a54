import { type Pool } from 'pg';
import { cancelsAskedIn, noteAnswer, statementCalled } from '../connection/cancel-asked.js';
import { transactionScope } from '../transaction/transaction-scope.js';

type ClientClass = new (...args: never[]) => { query(...args: unknown[]): unknown };

/** The watching subclass made of each client class, and those subclasses themselves. */
const watchedClasses = new WeakMap<ClientClass, ClientClass>();
const watchedOnes = new WeakSet<object>();
/** The pools told to watch each client they hand out, and the clients watched one by one. */
const poolsWatched = new WeakSet<object>();
const watchedClients = new WeakSet<object>();

/**
 * Makes the clients of `pool` (its own connections, and the control connections a data layer
 * opens with `new pool.Client()`, as Kysely's `'cancel query'` and `'kill session'` aborts do)
 * tell the library two things, so that a cancel or an end of the request's connection is
 * answered as what it is (see `isCancelAskedForError`):
 * - a `pg_cancel_backend(<pid>)` or `pg_terminate_backend(<pid>)` sent in a request's scope,
 *   by its own code: the request's transaction is told (`cancelAsked`), and notes it on its
 *   connection if that pid is its backend's;
 * - each error a query meets: the answer to what was asked of that connection is marked as
 *   the app's own (`noteAnswer`).
 * An operator's `pg_cancel_backend`, a pooler's `query_timeout` or a server's shutdown pass
 * through none of this: their errors stay the passing failures they look like (503). Installed
 * once per pool, with `joinTransactionsOfPool`; the class stays a subclass of the pool's own.
 */
export function watchCancels(pool: Pool): void {
  // The connections the pool opened before it was joined are of its class as it was: each is
  // watched as it is handed out (pg-pool's 'acquire', idle ones too), not only by its class.
  if (!poolsWatched.has(pool) && typeof pool.on === 'function') {
    poolsWatched.add(pool);
    pool.on('acquire', (client: object) => watchClient(client));
  }
  const holder = pool as unknown as { Client?: ClientClass };
  const Own = holder.Client;
  if (typeof Own !== 'function' || watchedOnes.has(Own)) return;
  // One subclass per class: the pools of one app share it.
  const known = watchedClasses.get(Own);
  if (known) {
    holder.Client = known;
    return;
  }
  class CancelWatchedClient extends Own {
    override query(...args: unknown[]): unknown {
      noteAsks(args);
      return watched(this, args, (rest) => super.query(...rest));
    }
  }
  watchedOnes.add(CancelWatchedClient);
  watchedClasses.set(Own, CancelWatchedClient);
  holder.Client = CancelWatchedClient;
}

/** Whether `Class` is a client class made here (`new pool.Client()` of a joined pool). */
export function isCancelWatchedClass(Class: unknown): boolean {
  return typeof Class === 'function' && watchedOnes.has(Class);
}

/** A client of a class not watched (opened before the join): its own `query` watched. */
function watchClient(client: object): void {
  if (watchedClients.has(client) || watchedOnes.has(client.constructor)) return;
  const holder = client as { query?: unknown };
  if (typeof holder.query !== 'function') return;
  // A `query` of the client's own (set on it by someone) is kept as it is; else its class's is
  // looked up at each call, not taken now: what patches the class later (an instrumentation
  // such as OpenTelemetry's, loaded after the pool opened) still sees every statement.
  const own = Object.prototype.hasOwnProperty.call(client, 'query')
    ? (holder.query as (...a: unknown[]) => unknown)
    : undefined;
  const proto = Object.getPrototypeOf(client) as { query: (...a: unknown[]) => unknown };
  watchedClients.add(client);
  holder.query = function watchedQuery(this: object, ...args: unknown[]): unknown {
    noteAsks(args);
    return watched(this, args, (rest) => (own ?? proto.query).apply(this, rest));
  };
}

/** Tells the request in scope of the backends a query asks to cancel or end. */
function noteAsks(args: unknown[]): void {
  const config = args[0] as { text?: unknown; values?: unknown; submit?: unknown } | null;
  const text = typeof config === 'string' ? config : config?.text;
  const values = Array.isArray(args[1]) ? args[1] : config?.values;
  for (const asked of cancelsAskedIn(text, Array.isArray(values) ? values : [])) {
    transactionScope.getStore()?.cancelAsked?.(asked);
  }
}

/**
 * Runs node-postgres' `query` with its error seen first by `noteAnswer`, in each of the forms
 * it takes: a promise, a callback, a submittable (a cursor, the library's own queries) whose
 * `handleError` node-postgres calls.
 */
function watched(client: object, args: unknown[], query: (args: unknown[]) => unknown): unknown {
  const calledAt = statementCalled();
  const submittable = args[0] as { submit?: unknown; handleError?: unknown } | null;
  if (typeof submittable?.submit === 'function') {
    const handleError = submittable.handleError;
    if (typeof handleError === 'function') {
      submittable.handleError = function watchedHandleError(
        this: unknown,
        error: unknown,
        ...rest: unknown[]
      ) {
        noteAnswer(client, error, calledAt);
        return (handleError as (...a: unknown[]) => unknown).call(this, error, ...rest);
      };
    }
    return query(args);
  }
  const at = args.findIndex((arg, index) => index > 0 && typeof arg === 'function');
  if (at > 0) {
    const callback = args[at] as (error: unknown, ...rest: unknown[]) => void;
    const rest = args.slice();
    rest[at] = (error: unknown, ...results: unknown[]) => {
      noteAnswer(client, error ?? undefined, calledAt);
      callback(error, ...results);
    };
    return query(rest);
  }
  const result = query(args);
  if (typeof (result as PromiseLike<unknown> | undefined)?.then !== 'function') return result;
  return (result as PromiseLike<unknown>).then(
    (value) => {
      noteAnswer(client, undefined, calledAt);
      return value;
    },
    (error: unknown) => {
      noteAnswer(client, error, calledAt);
      throw error;
    },
  );
}
