import pg, { type PoolClient, type QueryConfig, type QueryResult } from 'pg';
import { asDatabaseFailure } from './connection-errors.js';
import { withDeadline } from './deadline.js';
import { withLibraryTypes } from './library-types.js';

/**
 * The role, session authorization and search path the library's own statements run with
 * inside the request's transaction: those the transaction began with, whatever the handler set
 * since. A handler that narrows its own statements (`SET LOCAL ROLE app_user`,
 * `set_config('role', …, true)`, `SET LOCAL SESSION AUTHORIZATION app_user`,
 * `SET LOCAL search_path`: the Supabase/Drizzle RLS recipe) keeps that setting until COMMIT
 * (PostgreSQL keeps `SET LOCAL` across `RELEASE SAVEPOINT`), so that the library's fenced
 * update would run as a role that may not write its table (42501), or find another table.
 * The session authorization is put back first (setting it resets the role), and only when it
 * changed: it is looked up in the catalog, and most requests never touch it.
 *
 * Kept on the server, in two settings of the transaction's own (`SET LOCAL` semantics: gone
 * at its end, rolled back with a savepoint), so that nothing travels back to the process: taken
 * in the round trip of the `BEGIN`, put back in the round trip of the library's statement.
 * The search path is kept with a leading `=`, so that an empty one is told from none kept.
 */
export const CAPTURE_SESSION_STATE =
  "SELECT set_config('idempotency.role', current_setting('role'), true) AS role, " +
  "set_config('idempotency.authorization', current_setting('session_authorization'), true) " +
  'AS session_authorization, ' +
  "set_config('idempotency.search_path', '=' || current_setting('search_path'), true) " +
  'AS search_path, ' +
  // Not kept: read by the process, to tell a write the handler made impossible (its own
  // read-only mode) from one refused by a read-only server (see `beganReadOnly`).
  "current_setting('transaction_read_only') AS read_only";

/**
 * The role, session authorization and search path (with its leading `=`) the request's
 * transaction began with, as `CAPTURE_SESSION_STATE`'s row reads them, kept in the process
 * too: a handler's `RESET ALL` resets the settings they are kept in on the server to '' as
 * well, and the library's statements would then run as the handler's role (see
 * `restoreSessionState`).
 */
export interface BegunSessionState {
  role: string;
  session_authorization: string;
  search_path: string;
}

/** `CAPTURE_SESSION_STATE`'s row (an object, or node-postgres' array of fields) as kept. */
export function begunStateOf(row: unknown): BegunSessionState | undefined {
  const [role, session_authorization, search_path] = Array.isArray(row)
    ? (row as unknown[])
    : [
        (row as Record<string, unknown> | undefined)?.role,
        (row as Record<string, unknown> | undefined)?.session_authorization,
        (row as Record<string, unknown> | undefined)?.search_path,
      ];
  if (typeof search_path !== 'string' || !search_path.startsWith('=')) return undefined;
  return { role: String(role), session_authorization: String(session_authorization), search_path };
}

/** Nothing is set when nothing was kept (a transaction begun by other means). */
const KEPT = "WHERE current_setting('idempotency.role', true) <> ''";

const START_ROLE = "current_setting('idempotency.role')";
const START_PATH = "substr(current_setting('idempotency.search_path'), 2)";

/** Sets the session authorization to `value` (an SQL expression) if it is not that already. */
function authorizationTo(value: string): string {
  return (
    `CASE WHEN current_setting('session_authorization') <> ${value} ` +
    `THEN set_config('session_authorization', ${value}, true) END`
  );
}

const START_AUTHORIZATION = authorizationTo("current_setting('idempotency.authorization')");

/** Before the library's last statement (followed by COMMIT): the state kept at `BEGIN`. */
export const RESTORE_SESSION_STATE =
  `SELECT ${START_AUTHORIZATION}, ` +
  `set_config('role', ${START_ROLE}, true), ` +
  `set_config('search_path', ${START_PATH}, true) ${KEPT}`;

/**
 * The search path the library's own statements run with (a pure decision): the one the
 * start-up check resolved the library's tables through (`pinned`), when it passed, whatever the
 * session's is now; else the one the request's transaction began with (`kept`, with its leading
 * `=`), as before; undefined when neither is known (the session's own applies).
 *
 * A schema-per-tenant app's `SET search_path TO tenant_x` on a runner it gives back without a
 * reset leaves the pooled connection's session there: the library's unqualified tables would
 * then resolve in the tenant's schema (its own copy of them: a key claimed there is not seen by
 * a retry on another connection), or nowhere (a 500).
 */
export function librarySearchPath(
  pinned: string | undefined,
  kept: string | undefined,
): string | undefined {
  if (pinned !== undefined) return pinned;
  return kept?.startsWith('=') ? kept.slice(1) : undefined;
}

/**
 * The statement that sets the library's search path (`librarySearchPath`) for the rest of the
 * transaction (the implicit one of a round trip's statements, or the request's), sent in the
 * round trip of the statement it is for.
 */
export function pinSearchPath(path: string): string {
  return `SELECT set_config('search_path', ${pg.escapeLiteral(path)}, true)`;
}

/** After the library's statement in the handler's transaction: the path it began with back. */
export const UNPIN_SEARCH_PATH =
  `SELECT set_config('search_path', ${START_PATH}, true) ` +
  "WHERE current_setting('idempotency.search_path', true) <> ''";

/**
 * `RESTORE_SESSION_STATE`, from the state kept in the process (`kept`) when there is one: the
 * handler's `RESET ALL` cannot reach it. `pinned`: the search path the start-up check found
 * the library's tables through, set instead of the one kept (see `librarySearchPath`).
 */
export function restoreSessionState(kept?: BegunSessionState, pinned?: string): string {
  if (!kept) {
    if (pinned === undefined) return RESTORE_SESSION_STATE;
    // The role and authorization kept on the server, if any; the path set whatever was kept.
    return (
      `SELECT set_config('search_path', ${pg.escapeLiteral(pinned)}, true), ` +
      `(SELECT concat(${START_AUTHORIZATION}, set_config('role', ${START_ROLE}, true)) ${KEPT})`
    );
  }
  const path = librarySearchPath(pinned, kept.search_path) ?? '';
  return (
    `SELECT ${authorizationTo(pg.escapeLiteral(kept.session_authorization))}, ` +
    `set_config('role', ${pg.escapeLiteral(kept.role)}, true), ` +
    `set_config('search_path', ${pg.escapeLiteral(path)}, true)`
  );
}

/** The handler's own state, kept aside before a statement of the library's (`swapInSessionState`). */
const KEEP_HANDLER_STATE =
  "SELECT set_config('idempotency.handler_role', current_setting('role'), true), " +
  "set_config('idempotency.handler_authorization', current_setting('session_authorization'), " +
  'true), ' +
  "set_config('idempotency.handler_search_path', '=' || current_setting('search_path'), true)";

/**
 * `SWAP_IN_SESSION_STATE` and `SWAP_OUT_SESSION_STATE`, from the state kept in the process
 * (`kept`) when there is one: the handler's state kept aside and put back whatever its `RESET
 * ALL` did to the settings kept at `BEGIN` (guarded by the handler's own kept search path,
 * never empty once kept).
 */
export function swapSessionState(
  kept?: BegunSessionState,
  /** The search path the start-up check found the library's tables through (see above). */
  pinned?: string,
): { before: string[]; after: string[] } {
  if (!kept && pinned === undefined) {
    return { before: [SWAP_IN_SESSION_STATE], after: [SWAP_OUT_SESSION_STATE] };
  }
  return {
    before: [KEEP_HANDLER_STATE, restoreSessionState(kept, pinned)],
    after: [
      `SELECT ${authorizationTo("current_setting('idempotency.handler_authorization')")}, ` +
        "set_config('role', current_setting('idempotency.handler_role'), true), " +
        "set_config('search_path', substr(current_setting('idempotency.handler_search_path'), 2), " +
        "true) WHERE current_setting('idempotency.handler_search_path', true) <> ''",
    ],
  };
}

/**
 * Before a statement of the library's while the handler goes on (a lease renewal, a body
 * stored by pointer): the handler's state is kept aside, and the state kept at `BEGIN` set.
 */
export const SWAP_IN_SESSION_STATE =
  "SELECT set_config('idempotency.handler_role', current_setting('role'), true), " +
  "set_config('idempotency.handler_authorization', current_setting('session_authorization'), " +
  'true), ' +
  "set_config('idempotency.handler_search_path', '=' || current_setting('search_path'), true), " +
  `${START_AUTHORIZATION}, ` +
  `set_config('role', ${START_ROLE}, true), ` +
  `set_config('search_path', ${START_PATH}, true) ${KEPT}`;

/** After it: the handler's state back, for the handler's next statement. */
export const SWAP_OUT_SESSION_STATE =
  `SELECT ${authorizationTo("current_setting('idempotency.handler_authorization')")}, ` +
  "set_config('role', current_setting('idempotency.handler_role'), true), " +
  "set_config('search_path', substr(current_setting('idempotency.handler_search_path'), 2), " +
  `true) ${KEPT}`;

/**
 * A data layer's outermost transaction, nested in the request's as a savepoint: without the
 * library its `COMMIT` would end what it set with `SET LOCAL`, but a `RELEASE SAVEPOINT` keeps
 * it (the Supabase/Drizzle RLS recipe's `SET LOCAL ROLE` inside `db.transaction()` would then
 * run the handler's later statements as that role, where row-level security hides rows in
 * silence). Its role, session authorization and search path are kept after its `SAVEPOINT`
 * (in settings under `name`, rolled back with it) and put back after its `RELEASE`, in those
 * statements' round trips. A custom setting stays defined on the connection once made, so
 * `name` must come from a small set (the nesting depth), never a counter.
 */
export function keepNestedState(name: string): string {
  return (
    `SELECT set_config('idempotency.${name}_role', current_setting('role'), true) AS role, ` +
    `set_config('idempotency.${name}_authorization', ` +
    "current_setting('session_authorization'), true) AS session_authorization, " +
    `set_config('idempotency.${name}_search_path', '=' || current_setting('search_path'), ` +
    'true) AS search_path, ' +
    // When it began: the cursors opened in it, however (a DECLARE, a function's own), are those
    // made since (see `NestedCommit.endingText`).
    `set_config('idempotency.${name}_began', clock_timestamp()::text, true) AS began`
  );
}

/**
 * What `keepNestedState` kept, as its row reads (the search path with its leading `=`), where
 * the seam reads it back into the process (TypeORM: a round trip of its own).
 */
export interface KeptNestedState {
  role: string;
  session_authorization: string;
  search_path: string;
  began: string;
}

/**
 * After the savepoint's `RELEASE`: what `keepNestedState` kept (authorization first), read
 * from the settings it kept it in, or (`kept`) from the process, which a `RESET ALL` of its
 * code's (resetting those settings to '' too) cannot reach.
 */
export function restoreNestedState(name: string, kept?: KeptNestedState): string {
  const settingOf = (suffix: string) => `current_setting('idempotency.${name}_${suffix}')`;
  const authorization = kept
    ? pg.escapeLiteral(kept.session_authorization)
    : settingOf('authorization');
  const role = kept ? pg.escapeLiteral(kept.role) : settingOf('role');
  const path = kept ? pg.escapeLiteral(kept.search_path) : settingOf('search_path');
  return (
    `SELECT ${authorizationTo(authorization)}, set_config('role', ${role}, true), ` +
    `set_config('search_path', substr(${path}, 2), true)`
  );
}

/**
 * The values settings had before a nested transaction's code set them for the transaction
 * (`SET LOCAL statement_timeout`, `set_config('app.tenant', …, true)`: `localSettingsOf`), read
 * just before that statement; `$1` the names. Unset custom settings read as null.
 */
export const READ_SETTINGS =
  'SELECT name, current_setting(name, true) AS value FROM unnest($1::text[]) AS name';

/**
 * `READ_SETTINGS` of `names` after rolling back to `savepoint`, in one text (a text of several
 * statements takes no parameters: the names are quoted in it): while a caught failure aborts
 * the transaction, nothing but a `ROLLBACK TO` runs, so a text of the app's that recovers
 * with one (`ROLLBACK TO SAVEPOINT s; SELECT set_config(…, true)`) has its settings read
 * there. The app's text then rolls back to it again, with nothing run between: the same.
 */
export function readSettingsAfterRollbackTo(savepoint: string, names: readonly string[]): string {
  const list = names.map((name) => pg.escapeLiteral(name)).join(', ');
  return (
    `ROLLBACK TO SAVEPOINT ${pg.escapeIdentifier(savepoint)}; ` +
    `SELECT name, current_setting(name, true) AS value FROM unnest(ARRAY[${list}]::text[]) AS name`
  );
}

/**
 * Puts back, after a nested transaction's `RELEASE SAVEPOINT` (which keeps a `SET LOCAL`), the
 * values its code's settings had before it (`READ_SETTINGS`), as the nested transaction's
 * own `COMMIT` would have ended them without the library. One that was unset (a custom
 * setting, or an extension's not loaded yet: pg_trgm's threshold before the first `%`) is
 * reset to its default (`set_config` of null): its value may not be empty once the extension
 * has loaded meanwhile, and PostgreSQL cannot undefine it within the transaction.
 */
export function restoreSettings(before: ReadonlyMap<string, string | null>): string {
  const calls = [...before].map(
    ([name, value]) =>
      `set_config(${pg.escapeLiteral(name)}, ${value === null ? 'NULL' : pg.escapeLiteral(value)}, true)`,
  );
  return `SELECT ${calls.join(', ')}`;
}

/** The part of node-postgres' protocol connection that a query writes to. */
interface ProtocolConnection {
  execute(config: { portal: string; rows?: number }): void;
  parse(config: { text: string; name?: string; types?: unknown[] }): void;
  bind(config: { portal?: string; statement?: string; values?: unknown[] }): void;
  sync(): void;
}

/** node-postgres' record of the named statements a connection has parsed. */
interface ParsedStatements {
  parsedStatements: Record<string, string>;
}

type QueryClass = new (
  config: QueryConfig,
  values: undefined,
  callback: (error: Error | null, result?: QueryResult) => void,
) => object;

const Query = pg.Query as unknown as QueryClass;
const { prepare, handleDataRow, handleCommandComplete, handleError } = (
  pg.Query as unknown as {
    prototype: {
      prepare(connection: ProtocolConnection): void;
      handleError(error: unknown, connection: unknown): void;
      handleDataRow(message: unknown): void;
      handleCommandComplete(message: unknown, connection: unknown): void;
    };
  }
).prototype;

/**
 * node-postgres' own prepared query (its parameters sent in binary, never written into a
 * text), with statements of the library's without parameters parsed, bound and executed
 * before it and after it, before the Sync that ends the round trip. Their rows and
 * completions are not reported: the caller sees the statement's result alone. PostgreSQL skips
 * every message up to the Sync after an error, so nothing after a failed statement runs.
 */
class SurroundedQuery extends Query {
  declare readonly name?: string;
  declare hasBeenParsed: (connection: ProtocolConnection) => boolean;

  /** Completions still to come from the statements before it. */
  private before: number;
  /** Whether the statement itself completed: what completes after it is not reported. */
  private done = false;
  /** Whether the connection had parsed the (named) statement before this round trip. */
  private parsedBefore = false;

  constructor(
    config: QueryConfig,
    private readonly leading: string[],
    private readonly trailing: string[],
    callback: (error: Error | null, result?: QueryResult) => void,
  ) {
    super(config, undefined, callback);
    this.before = leading.length;
  }

  /**
   * Always the extended protocol: node-postgres sends a statement without a name or values as
   * a simple query, which never calls `prepare`, so the statements around it would be skipped
   * and its rows lost (the start-up check's unnamed catalog reads, run on the pinned path).
   */
  requiresPreparation(): boolean {
    return true;
  }

  prepare(connection: ProtocolConnection): void {
    this.parsedBefore = this.hasBeenParsed(connection);
    for (const text of this.leading) {
      connection.parse({ text });
      connection.bind({});
      connection.execute({ portal: '' });
    }
    prepare.call(this, connection);
  }

  _getRows(connection: ProtocolConnection, rows?: number): void {
    connection.execute({ portal: '', rows });
    for (const text of this.trailing) {
      connection.parse({ text });
      connection.bind({});
      connection.execute({ portal: '' });
    }
    connection.sync();
  }

  /**
   * node-postgres marks a named statement parsed at the round trip's first ParseComplete,
   * which is a leading statement's: if that statement then failed, PostgreSQL skipped the
   * named one's Parse, and the mark would make the next use skip it too (26000).
   */
  handleError(error: unknown, connection: ProtocolConnection & ParsedStatements): void {
    if (this.before > 0 && !this.parsedBefore && this.name) {
      delete connection.parsedStatements[this.name];
    }
    handleError.call(this, error, connection);
  }

  handleDataRow(message: unknown): void {
    if (this.before > 0 || this.done) return;
    handleDataRow.call(this, message);
  }

  handleCommandComplete(message: unknown, connection: unknown): void {
    if (this.before > 0) {
      this.before--;
      return;
    }
    if (this.done) return;
    this.done = true;
    handleCommandComplete.call(this, message, connection);
  }
}

/**
 * Runs `statement` with `before` and `after` in one round trip, bounded by `timeoutMs` if
 * given: its result. A socket's error is marked as the database's (the outcome is unknown).
 */
export function runSurrounded(
  client: PoolClient,
  statement: QueryConfig,
  timeoutMs: number | undefined,
  surround: { before?: string[]; after?: string[] },
): Promise<QueryResult> {
  const done = new Promise<QueryResult>((resolve, reject) => {
    // A statement of the library's own: read with its parsers (see `library-types.ts`).
    const query = new SurroundedQuery(
      withLibraryTypes(statement),
      surround.before ?? [],
      surround.after ?? [],
      (error, result) => (error ? reject(asDatabaseFailure(error)) : resolve(result!)),
    );
    void client.query(query as unknown as pg.Query);
  });
  if (timeoutMs === undefined) return done;
  return withDeadline(done, timeoutMs, `statement ${statement.name ?? ''}`);
}
