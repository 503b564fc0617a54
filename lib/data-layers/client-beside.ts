import { isLibraryClient } from '../connection/own-connection.js';
import { transactionScope } from '../transaction/transaction-scope.js';
import { isCancelWatchedClass } from './cancel-watch.js';

/** What is known of a client whose statement was sent in a request's scope. */
export interface ClientSeen {
  /** pg-pool gave it a `release`: a pool's client (the joined pool's, or another's, told apart there). */
  handedOut: boolean;
  /** Made by a data layer with `new pool.Client()` of the joined pool (Kysely's cancel connection). */
  controlConnection: boolean;
  /** One the library opened itself (a host probe). */
  libraryOwn: boolean;
}

/**
 * Whether a client is one the app connected itself beside the joined pool (a pure decision):
 * its statements commit on their own, not with the stored answer, and a retry runs them again,
 * as a second pool's do, so it is warned of as one is. A pool's client is judged with its pool
 * (`watchOtherPools`); a control connection of the joined pool and the library's own are not
 * the app's writes.
 */
export function isClientBeside(seen: ClientSeen): boolean {
  return !seen.handedOut && !seen.controlConnection && !seen.libraryOwn;
}

const watched = new WeakSet<object>();

interface ClientMethods {
  query(...args: unknown[]): unknown;
}

/**
 * Makes a statement of a client of `Client` (the joined pool's class, `pg.Client` as a rule)
 * that no pool handed out tell the transaction of its scope (`otherPool`), which warns once per
 * client: `new pg.Client(...)` connected by the app, used in an idempotent request. Outside a
 * scope, or for a pool's client, one property read more per statement.
 */
export function watchClientsBeside(Client: unknown): void {
  const methods = (Client as { prototype?: ClientMethods } | undefined)?.prototype;
  if (typeof methods?.query !== 'function' || watched.has(methods)) return;
  watched.add(methods);
  const { query } = methods;
  methods.query = function besideQuery(this: object, ...args: unknown[]): unknown {
    if (typeof (this as { release?: unknown }).release !== 'function') {
      const scope = transactionScope.getStore();
      if (
        scope?.otherPool &&
        isClientBeside({
          handedOut: false,
          controlConnection: isCancelWatchedClass(this.constructor),
          libraryOwn: isLibraryClient(this),
        })
      ) {
        scope.otherPool(this);
      }
    }
    return query.apply(this, args);
  };
}
