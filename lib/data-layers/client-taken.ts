import { type Pool, type PoolClient } from 'pg';
import { refusedStatement } from '../transaction/refused-statement.js';
import { isSubmittable, textOf } from '../transaction/request-transaction.js';
import { ClientTakenElsewhereError } from '../transaction/seam-errors.js';
import { type JoinableTransaction, transactionScope } from '../transaction/transaction-scope.js';
import { placeOfClient } from './client-place.js';
import { OutsideScope } from './outside-scope.js';
import { listenTextOf } from './view-listener.js';

/**
 * How each client a joined pool hands out as itself (not a view) was taken, until it is given
 * back: the pool, and whether in `IdempotentTransaction.outside()` (see `placeOfClient`).
 * Cleared at its release: the library takes the same connections later for its own work
 * (`connectOwn`), whose statements are never judged here.
 */
const taken = new WeakMap<object, { pool: object; left: boolean }>();
const poolsWatched = new WeakSet<object>();
const clientsWatched = new WeakSet<object>();

/** Forgets how `pool`'s clients were taken as each is given back. Once per pool. */
export function watchTakenClients(pool: Pool): void {
  if (poolsWatched.has(pool) || typeof pool.on !== 'function') return;
  poolsWatched.add(pool);
  pool.on('release', (_error: unknown, client: object) => taken.delete(client));
}

/**
 * `client`, just handed out by `pool` as itself in `scope`, the one its `connect()` ran in (outside every
 * request, in `outside()`, in a scope that joins nothing): its statements sent later from an
 * open request or phase are refused (`placeOfClient`), as they would commit apart from it
 * (adversary 103: an app's client taken in `onModuleInit` wrote once per try).
 */
export function noteTaken(
  pool: object,
  client: PoolClient,
  scope: JoinableTransaction | undefined,
): void {
  taken.set(client, { pool, left: scope instanceof OutsideScope });
  if (clientsWatched.has(client)) return;
  clientsWatched.add(client);
  const holder = client as unknown as { query: (...args: unknown[]) => unknown };
  // A `query` of the client's own (the cancel watch's, an instrumentation's) is kept; else its
  // class's is looked up at each call, so that what patches the class later still sees it.
  const own = Object.prototype.hasOwnProperty.call(client, 'query') ? holder.query : undefined;
  const proto = Object.getPrototypeOf(client) as typeof holder;
  holder.query = function placedQuery(this: object, ...args: unknown[]): unknown {
    const refused = refusalOf(this, args);
    if (refused) return refusedStatement(args, refused);
    return (own ?? proto.query).apply(this, args);
  };
}

/** The refusal of a statement on `client` sent from the scope running now, if it is refused. */
function refusalOf(client: object, args: unknown[]): ClientTakenElsewhereError | undefined {
  const mark = taken.get(client);
  const scope = transactionScope.getStore();
  if (!mark || !scope) return undefined;
  // `LISTEN` and `UNLISTEN` last for the session, commit nothing, and run the same anywhere.
  if (!isSubmittable(args[0]) && listenTextOf(textOf(args[0])) === 'listen') return undefined;
  const held = mark.left ? 'left' : 'connection';
  if (placeOfClient(held, scope.poolScope?.(mark.pool) ?? 'elsewhere') !== 'refuse') {
    return undefined;
  }
  const error = new ClientTakenElsewhereError();
  scope.refuseRunner?.(error);
  return error;
}
