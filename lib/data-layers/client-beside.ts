import { isLibraryClient } from '../connection/own-connection.js';
import { transactionScope } from '../transaction/transaction-scope.js';
import { isCancelWatchedClass } from './cancel-watch.js';
import { listenTextOf } from './view-listener.js';

/** What is known of a client whose statement was sent in a request's scope. */
export interface ClientSeen {
  /**
   * A pg-pool handed it out (the joined pool's, or another's, told apart there): noted at its
   * checkout (`noteClientsHandedOut`), not by a `release` any object can be given (a
   * `pg.Client` the app put a data layer on with `Object.assign(client, { release })`).
   */
  handedOut: boolean;
  /** Made by a data layer with `new pool.Client()` of the joined pool (Kysely's cancel connection). */
  controlConnection: boolean;
  /** One the library opened itself (a host probe). */
  libraryOwn: boolean;
  /**
   * The statement is `LISTEN`/`UNLISTEN` only (`listenTextOf`): the session's, it commits
   * nothing a retry could repeat (an app's notification client a handler subscribes on).
   */
  listenOnly: boolean;
}

/**
 * Whether a client is one the app connected itself beside the joined pool (a pure decision):
 * its statements commit on their own, not with the stored answer, and a retry runs them again,
 * as a second pool's do, so it is warned of as one is. A pool's client is judged with its pool
 * (`watchOtherPools`); a control connection of the joined pool and the library's own are not
 * the app's writes.
 */
export function isClientBeside(seen: ClientSeen): boolean {
  return !seen.handedOut && !seen.controlConnection && !seen.libraryOwn && !seen.listenOnly;
}

const watched = new WeakSet<object>();

/** The clients pg-pools handed out, and the pools whose checkouts are noted. */
const handedOut = new WeakSet<object>();
const noting = new WeakSet<object>();

/**
 * Notes the clients `pool` (a pg-pool) made so far (its `_clients`) and every one it hands out
 * from now on (its `acquire` event, emitted at each checkout before `connect()` resolves):
 * those are a pool's, judged with their pool. Called when a pool is joined, and at the first
 * `connect()` of any other pool of its class (`watchOtherPools`).
 */
export function noteClientsHandedOut(pool: object): void {
  const events = pool as {
    on?: (event: string, listener: (client: object) => void) => void;
    _clients?: unknown;
  };
  if (noting.has(pool) || typeof events.on !== 'function') return;
  noting.add(pool);
  if (Array.isArray(events._clients)) {
    for (const client of events._clients as object[]) handedOut.add(client);
  }
  events.on('acquire', (client) => handedOut.add(client));
}

interface ClientMethods {
  query(...args: unknown[]): unknown;
}

/**
 * Makes a statement of a client of `Client` (the joined pool's class, `pg.Client` as a rule)
 * that no pool handed out (`noteClientsHandedOut`) tell the transaction of its scope (`otherPool`), which warns once per
 * client: `new pg.Client(...)` connected by the app, used in an idempotent request. Outside a
 * scope, one lookup more per statement.
 */
export function watchClientsBeside(Client: unknown): void {
  const methods = (Client as { prototype?: ClientMethods } | undefined)?.prototype;
  if (typeof methods?.query !== 'function' || watched.has(methods)) return;
  watched.add(methods);
  const { query } = methods;
  methods.query = function besideQuery(this: object, ...args: unknown[]): unknown {
    const scope = transactionScope.getStore();
    if (scope?.otherPool) {
      if (
        isClientBeside({
          handedOut: handedOut.has(this),
          controlConnection: isCancelWatchedClass(this.constructor),
          libraryOwn: isLibraryClient(this),
          // A getter: the text is parsed only for a client none of the above already tells,
          // not on every statement of a pool's client in a request (`isClientBeside` reads it
          // last).
          get listenOnly() {
            return listenTextOf(textOfQuery(args[0])) === 'listen';
          },
        })
      ) {
        scope.otherPool(this);
      }
    }
    return query.apply(this, args);
  };
}

/** A query's text: the string, or a config's (or a `pg.Query`'s) `text`. */
function textOfQuery(query: unknown): unknown {
  return typeof query === 'object' && query !== null ? (query as { text?: unknown }).text : query;
}
