/**
 * Whether a client the app's pool (or TypeORM's driver) hands out is node-postgres' JavaScript
 * client, the one the library speaks to: it reads its own rows with per-query parsers (which
 * pg's native client, `pg.native` on pg-native/libpq, ignores: the app's parsers would read
 * the library's rows) and sends some statements at the protocol level, beside the app's
 * (`runSurrounded`), through the client's `connection`, which the native client does not
 * have. On such a pool the first request failed with a bare TypeError and its key was left
 * with a fingerprint no retry matched (422 for the same request): the module refuses to start.
 */
export function isJavaScriptClient(client: unknown): boolean {
  const connection = (client as { connection?: { parse?: unknown } } | null)?.connection;
  return typeof connection?.parse === 'function';
}

/** The module's refusal to start on a pool of clients that are not node-postgres' own. */
export class NativeClientError extends Error {
  constructor() {
    super(
      "IdempotencyModule: the app's pool hands out clients that are not node-postgres' " +
        "JavaScript client (pg.native on pg-native, pg's own Pool with NODE_PG_FORCE_NATIVE " +
        "set in the environment, TypeORM's useNative: true, or another driver's): the library " +
        "reads its own rows with node-postgres' per-query type parsers and sends statements " +
        'through its protocol connection, neither of which such a client has. Make the pool ' +
        "with pg's own Pool (new Pool() from 'pg', not pg.native.Pool), unset " +
        "NODE_PG_FORCE_NATIVE, or drop useNative from TypeORM's options.",
    );
    this.name = 'NativeClientError';
  }
}
