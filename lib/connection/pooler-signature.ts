import { type PoolerMode } from '../shapes/idempotency-options.interface.js';

/**
 * What one connection says of itself: the process id it was given at login (the protocol's
 * `BackendKeyData`, `processID` of a node-postgres client; undefined when the driver does not
 * keep it) and `pg_backend_pid()`, the server process that ran a statement on it.
 */
export interface SessionIds {
  announced: number | undefined;
  backend: number;
}

/**
 * Whether the connection reaches PostgreSQL directly or through a pooler. PostgreSQL announces
 * the pid of the process that serves the connection, so the two ids are equal on a direct
 * connection, and through a TCP proxy or tunnel that forwards bytes (HAProxy, a cloud SQL
 * proxy, Docker's port mapping). A pooler announces a key of its own (PgBouncer in session and
 * transaction modes alike: random bytes, which it maps to a server connection for cancels), as
 * its sessions are not the client's. A driver that kept no id cannot tell: that is taken as a
 * pooler, whose setting works everywhere (see `effectivePooler`).
 */
export function poolerSignature({ announced, backend }: SessionIds): 'direct' | 'pooler' {
  return announced === backend ? 'direct' : 'pooler';
}

/**
 * The mode the library runs in: the one the app set, except `'none'` once a pooler was seen
 * (after start-up; at start-up that refuses to start), and, with none set, the one seen. While
 * nothing is known yet (the database was down at start-up), as behind a transaction pooler:
 * unnamed statements and maintenance in single transactions work with any pooler and without
 * one, only a little slower, where named statements would fail behind one.
 */
export function effectivePooler(
  configured: PoolerMode | undefined,
  seen: 'direct' | 'pooler' | undefined,
): PoolerMode {
  if (configured === 'session' || configured === 'transaction') return configured;
  if (seen === 'pooler') return 'transaction';
  if (seen === 'direct' || configured === 'none') return 'none';
  return 'transaction';
}

/** Whether a mode leaves the question to the start-up probe. */
export function probesForPooler(configured: PoolerMode | undefined): boolean {
  return configured === undefined || configured === 'none';
}

/** Said once, when a pooler was seen and the app set no `pooler`. */
export function adaptedToPooler({ announced, backend }: SessionIds): string {
  return (
    `the database connection goes through a connection pooler (it was announced as process ` +
    `${announced ?? 'unknown'} and is served by ${backend}: PgBouncer's signature, in session and ` +
    "transaction modes alike): the library runs as with pooler: 'transaction', its statements " +
    'sent unnamed and its maintenance in single transactions, which works in either mode. Set ' +
    "pooler: 'transaction' in IdempotencyModule.forRoot() to say so, or pooler: 'session' for a " +
    'pooler in session mode, to keep its prepared statements'
  );
}

/** Why an app that set `pooler: 'none'` does not start behind a pooler. */
export function noneBehindPooler({ announced, backend }: SessionIds): string {
  return (
    `pooler: 'none' says the app connects to PostgreSQL directly, but its connection goes ` +
    `through a connection pooler (announced as process ${announced ?? 'unknown'}, served by ` +
    `${backend}). Set pooler: 'transaction' in IdempotencyModule.forRoot() for a pooler in ` +
    "transaction mode (PgBouncer's pool_mode = transaction, Supavisor on port 6543, RDS Proxy), " +
    "pooler: 'session' for one in session mode, or leave pooler unset to let the library adapt"
  );
}
