import pg, { type Pool, type PoolClient } from 'pg';
import {
  asDatabaseFailure,
  DatabaseDeadlineError,
  isServerError,
  markDatabaseFailure,
} from './connection-errors.js';
import { connectOwn } from './own-connection.js';
import { withLibraryTypes } from './library-types.js';

export { DatabaseDeadlineError } from './connection-errors.js';

/**
 * Waits for `promise` at most `timeoutMs`. Past it, `onLate` is told (so that what was
 * started can be undone when it ends) and the caller gets a `DatabaseDeadlineError`, once
 * `onLate` is done: a cancel request must reach a pooler (PgBouncer) while the client
 * connection it names is still open, since the pooler routes it by that connection, and the
 * caller drops the connection as soon as it hears of the deadline. Whatever `promise` does
 * after the deadline (the cancelled statement's error, say), the caller gets the deadline.
 */
export function withDeadline<T>(
  promise: Promise<T>,
  timeoutMs: number,
  what: string,
  onLate?: () => void | Promise<void>,
  server?: string,
): Promise<T> {
  // One promise and one timer: every statement of every request goes through here.
  return new Promise<T>((resolve, reject) => {
    let late = false;
    const timer = setTimeout(() => {
      late = true;
      void Promise.resolve()
        .then(onLate)
        .catch(() => undefined)
        .then(() => reject(new DatabaseDeadlineError(what, timeoutMs, server)));
    }, timeoutMs);
    promise.then(
      (value) => {
        if (late) return;
        clearTimeout(timer);
        resolve(value);
      },
      (error: unknown) => {
        if (late) return;
        clearTimeout(timer);
        reject(error);
      },
    );
  });
}

/**
 * A connection from the pool, waited for at most `timeoutMs`. A connection that arrives after
 * the caller gave up goes straight back to the pool unused: a claim queued behind an outage
 * must never run once its client was told 503 ("nothing was executed").
 */
export function acquire(pool: Pool, timeoutMs: number | 'as-the-pool'): Promise<PoolClient> {
  let late = false;
  // A refused or reset connection comes as the socket's error: marked as the database's.
  const connecting = connectOwn(pool).catch((error: unknown) => {
    throw asDatabaseFailure(error);
  });
  // Waited for as the app's pool waits (its `connectionTimeoutMillis`): for the app's own
  // statements, which without the library would wait in its queue.
  if (timeoutMs === 'as-the-pool') {
    return connecting.then((client) => {
      listenForErrors(client);
      return client;
    });
  }
  return withDeadline(connecting, timeoutMs, 'waiting for a connection', () => {
    late = true;
    connecting.then(
      (client) => client.release(),
      () => undefined,
    );
  }).then((client) => {
    if (late) throw new DatabaseDeadlineError('waiting for a connection', timeoutMs);
    listenForErrors(client);
    return client;
  });
}

const listening = new WeakSet<PoolClient>();

/**
 * A connection that breaks while it is checked out emits `error` on its client, and the pool
 * listens only to idle ones: without a listener of its own the process would crash. The
 * statements that were running or queued fail with the same error, which is where it is
 * handled; node-postgres hands it to them on the next tick, after this event, so it is marked
 * here as the database's first. A socket's `EPIPE` or `ECONNRESET` carries nothing that says
 * so, and a data layer (Prisma's adapter, Kysely) hands it on to the handler as it is, where
 * it must not be taken for the handler's own HTTP call failing: a 503, not a stored 500.
 */
function listenForErrors(client: PoolClient): void {
  if (listening.has(client)) return;
  listening.add(client);
  client.on('error', (error: unknown) => void markDatabaseFailure(error));
}

/** How `queryWithDeadline` treats its statement past the deadline. */
export interface StatementDeadline<R extends pg.QueryResultRow> {
  /**
   * The statement commits the request's answer or recovery point (`COMMIT`, or a fenced
   * statement alone): it is not cancelled, only its connection dropped (see below).
   */
  commits?: boolean;
  /**
   * The statement's answer, when it comes after the deadline: the caller was told of the
   * deadline (a 503, "nothing was executed"), so what the statement did (a key it claimed) is
   * the caller's to undo. An autocommit statement that answers has committed.
   */
  late?: (result: pg.QueryResult<R>) => void;
  /**
   * How the statement is sent, when not as it is (`client.query(config)`): with statements of
   * the library's around it in its round trip (the library's search path, see
   * `librarySearchPath`).
   */
  send?: () => Promise<pg.QueryResult<R>>;
}

/**
 * Runs one statement on `client` for at most `timeoutMs`. Past it, the statement is cancelled
 * on the server (PostgreSQL's cancel request, on a connection of its own) and the connection
 * is marked broken, so that a statement the server had not run yet never runs afterwards.
 * Returns the pg result; the caller releases `client` normally when this resolves.
 *
 * The caller hears of the deadline once the statement has ended, not merely once the cancel
 * was sent (see `cancelled`): a statement that was about to end when its deadline came (the
 * lock it waited on was just given up) commits before the cancel reaches it, and its answer
 * is on its way. That answer goes to `late`, where the caller undoes what it did; dropped
 * with the connection, it would leave a claimed key held to its lease, by nobody.
 *
 * `commits`: the statement commits the request's answer or recovery point (`COMMIT`, or a
 * fenced statement alone). It is not cancelled, only its connection dropped: a commit late
 * past its deadline is most often one waiting in `SyncRep` for a synchronous standby that is
 * gone, and a cancel ends that wait with the transaction committed on the primary alone
 * (PostgreSQL's "canceling wait for synchronous replication"), visible there, and replayed
 * to a retry as an answer no standby holds. Left waiting, it holds its rows until a standby
 * confirms it (then a retry replays it) or the primary is gone (then nobody saw it). One that
 * had not run yet may still run: the client was told 503, an unknown outcome, and the fence
 * decides, as for a commit whose answer was lost.
 */
export async function queryWithDeadline<R extends pg.QueryResultRow>(
  client: PoolClient,
  config: pg.QueryConfig,
  timeoutMs: number,
  { commits = false, late, send }: StatementDeadline<R> = {},
): Promise<pg.QueryResult<R>> {
  // The library's parsers, never the app's (see `library-types.ts`).
  const running = (send ? send() : client.query<R>(withLibraryTypes(config))).catch(
    async (error: unknown) => {
      if (error instanceof Error && isServerError(error)) await sessionPast(client);
      throw asDatabaseFailure(error);
    },
  );
  return withDeadline(running, timeoutMs, `statement ${config.name ?? ''}`, () => {
    if (late) void running.then(late, () => undefined);
    return commits ? undefined : cancelled(client, running);
  });
}

/**
 * Ends once `client`'s session is past the statement that just failed. PostgreSQL sends a
 * statement's error before it aborts the statement's transaction, so the locks it took (a
 * key's advisory lock) are still held when node-postgres hands the error on. A caller that
 * runs again at once on another connection (a batch of claims sent again claim by claim, a
 * claim rolled back by a serialization failure) would meet its own lock and answer a key
 * "held" that nobody holds. The empty statement is sent once the session is ready for the
 * next (node-postgres queues it until then), which the server says after the abort. Bounded
 * by the caller's deadline; a session that fails it has nothing left to wait for.
 */
function sessionPast(client: PoolClient): Promise<void> {
  return client.query('').then(
    () => undefined,
    () => undefined,
  );
}

/**
 * Cancels the statement `running` on `client` and waits until the cancel was acted on and the
 * statement has ended (its error: the cancel took; or its answer: it ended first), at most
 * `CANCEL_WAIT_MS` in all. Until then the connection stays open: its answer is read, and a
 * cancel still on its way never meets the connection's next statement. A statement that has
 * not ended by then (the server or the network stalled) is left to the dropped connection, or
 * to the deadline of the statement its caller sends next.
 */
export function cancelled(client: PoolClient, running: Promise<unknown>): Promise<void> {
  const ended = running.then(
    () => undefined,
    () => undefined,
  );
  let timer: NodeJS.Timeout | undefined;
  const bound = new Promise<void>((resolve) => (timer = setTimeout(resolve, CANCEL_WAIT_MS)));
  return Promise.race([Promise.all([cancelQuery(client), ended]), bound]).then(() =>
    clearTimeout(timer),
  );
}

/** The fields of node-postgres' client that a cancel request needs (not in its types). */
interface CancellableClient {
  host?: string;
  port?: number;
  processID?: number;
  secretKey?: number;
}

/**
 * Sends PostgreSQL's cancel request for the statement running on `client`'s connection, on a
 * connection of its own, as `Client#cancel` of node-postgres does (without its deprecated
 * accessor). The connection is checked out by the library alone and runs one statement at a
 * time, so what runs there is ours. Resolves once the server (or the pooler in front of it)
 * has closed the cancel's connection, which it does when it has acted on it, or after
 * `CANCEL_WAIT_MS`. Best effort: a server that cannot be reached cannot run the statement
 * either; the caller drops the connection anyway.
 */
export function cancelQuery(client: PoolClient): Promise<void> {
  const { host, port, processID, secretKey } = client as unknown as CancellableClient;
  if (processID === undefined || secretKey === undefined) return Promise.resolve();
  return new Promise<void>((resolve) => {
    try {
      const connection = new (
        pg as unknown as { Connection: new () => CancelConnection }
      ).Connection();
      // A server that does not answer must neither crash the process nor keep the socket.
      connection.on('error', () => resolve());
      connection.on('end', () => resolve());
      setTimeout(resolve, CANCEL_WAIT_MS).unref();
      setTimeout(() => connection.stream?.destroy(), CANCEL_SOCKET_MS).unref();
      connection.on('connect', () => connection.cancel(processID, secretKey));
      if (host?.startsWith('/')) connection.connect(`${host}/.s.PGSQL.${port}`);
      else connection.connect(port, host);
    } catch {
      // Nothing more can be done.
      resolve();
    }
  });
}

/** How long the cancel request's own socket may live: it is answered at once, or never. */
const CANCEL_SOCKET_MS = 5_000;

/**
 * How long a caller past its deadline waits for its cancel request to be acted on and its
 * statement to end, before it hears of the deadline and drops its connection: a round trip or
 * two on a healthy server, and a bound on the delay a server that does not answer adds to the
 * 503.
 */
const CANCEL_WAIT_MS = 1_000;

interface CancelConnection {
  on(event: 'error' | 'connect' | 'end', listener: () => void): void;
  connect(portOrPath: number | string | undefined, host?: string): void;
  cancel(processID: number, secretKey: number): void;
  stream?: { destroy(): void };
}
