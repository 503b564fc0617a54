/**
 * What a session that refused a write (SQLSTATE 25006) says about itself, read on that session
 * right after the refusal.
 */
export interface ReadOnlySession {
  /** `pg_is_in_recovery()`: the server is a standby. */
  inRecovery: boolean;
  /** `pg_settings.source` of `default_transaction_read_only` on that session. */
  source: string;
}

/** One statement, on the session that refused the write: the facts `readOnlyLasts` reads. */
export const READ_ONLY_PROBE = `SELECT pg_is_in_recovery() AS "inRecovery", source
FROM pg_settings WHERE name = 'default_transaction_read_only'`;

/**
 * Where a session's read-only default comes from when the app itself put it there: the app's
 * database (`ALTER DATABASE ... SET`), its role (`ALTER ROLE ... SET`), both, its connection
 * (`options=-c default_transaction_read_only=on`, `PGOPTIONS`) or a `SET` on the session.
 */
const APP_SOURCES = new Set(['database', 'user', 'database user', 'client', 'session']);

/**
 * Whether a refused write means "this will not become writable": the server is a primary (not
 * in recovery) and the session is read-only by the app's own database, role or connection
 * settings. Only an operator changes those.
 *
 * Every other read-only session may become writable by itself, and stays a 503 to retry:
 * - a standby (`inRecovery`): connected to it during a failover, it may be promoted, and the
 *   pool's next connection may find the new primary;
 * - a primary read-only by its server configuration (`configuration file`, `command line`):
 *   that is how failover managers fence a node, e.g. pg_auto_failover sets
 *   `ALTER SYSTEM SET default_transaction_read_only = on` on a standby it promotes until the old
 *   primary is demoted, then turns it off. So `default_transaction_read_only` on a primary is
 *   not enough to call it lasting: only where it was set says so.
 */
export function readOnlyLasts(session: ReadOnlySession): boolean {
  return !session.inRecovery && APP_SOURCES.has(session.source);
}

/** The operator's explanation of a lasting read-only session. */
export function readOnlyExplanation(session: ReadOnlySession): string {
  const where: Record<string, string> = {
    database: 'the database (ALTER DATABASE ... SET)',
    user: 'the role (ALTER ROLE ... SET)',
    'database user': 'the role in this database (ALTER ROLE ... IN DATABASE ... SET)',
    client: "the connection's parameters (options=-c ..., PGOPTIONS)",
    session: 'a SET on the session',
  };
  return (
    'the database refuses writes on every session of the app: default_transaction_read_only ' +
    `is on for ${where[session.source] ?? session.source}, on a primary. Turn it off there ` +
    '(e.g. ALTER DATABASE <name> RESET default_transaction_read_only), or point the app at a ' +
    'database it may write to'
  );
}
