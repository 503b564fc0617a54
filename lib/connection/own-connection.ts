import { type Pool, type PoolClient } from 'pg';

/**
 * The `connect` of each app pool the library joins requests to, as it was before (see
 * `joinTransactionsOfPool`): the library's own statements (claims, heartbeats, stored
 * answers) always take a connection of their own, even when they run inside a request's scope.
 */
const ownConnects = new WeakMap<object, Pool['connect']>();

/** Keeps `pool`'s own `connect`, before it is made to join requests; false if kept already. */
export function keepOwnConnect(pool: Pool): boolean {
  if (ownConnects.has(pool)) return false;
  ownConnects.set(pool, pool.connect);
  return true;
}

/** A connection of the pool's own, never one joined to a request's transaction. */
export function connectOwn(pool: Pool): Promise<PoolClient> {
  const connect = ownConnects.get(pool) ?? pool.connect;
  return (connect as () => Promise<PoolClient>).call(pool);
}

/** Clients the library connects itself (a host probe): never the app's, whatever they send. */
const libraryClients = new WeakSet<object>();

/** Marks `client` as the library's own (see `isLibraryClient`). */
export function markLibraryClient<C extends object>(client: C): C {
  libraryClients.add(client);
  return client;
}

/** Whether the library connected `client` itself. */
export function isLibraryClient(client: object): boolean {
  return libraryClients.has(client);
}
