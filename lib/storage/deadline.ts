import pg, { type Pool, type PoolClient } from 'pg';

/** Thrown when PostgreSQL did not answer within the library's `databaseTimeoutMs`. */
export class DatabaseDeadlineError extends Error {
  constructor(what: string, timeoutMs: number) {
    super(`${what}: no answer from PostgreSQL within ${timeoutMs} ms`);
    this.name = 'DatabaseDeadlineError';
  }
}

/**
 * Waits for `promise` at most `timeoutMs`. Past it, `onLate` is told (so that what was
 * started can be undone when it ends) and the caller gets a `DatabaseDeadlineError`.
 */
export async function withDeadline<T>(
  promise: Promise<T>,
  timeoutMs: number,
  what: string,
  onLate?: () => void,
): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  const deadline = new Promise<never>((_, reject) => {
    timer = setTimeout(() => {
      onLate?.();
      reject(new DatabaseDeadlineError(what, timeoutMs));
    }, timeoutMs);
  });
  try {
    return await Promise.race([promise, deadline]);
  } finally {
    clearTimeout(timer);
  }
}

/**
 * A connection from the pool, waited for at most `timeoutMs`. A connection that arrives after
 * the caller gave up goes straight back to the pool unused: a claim queued behind an outage
 * must never run once its client was told 503 ("nothing was executed").
 */
export function acquire(pool: Pool, timeoutMs: number): Promise<PoolClient> {
  let late = false;
  const connecting = pool.connect();
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
 * statement that was running fails with the same error, which is where it is handled.
 */
function listenForErrors(client: PoolClient): void {
  if (listening.has(client)) return;
  listening.add(client);
  client.on('error', () => undefined);
}

/**
 * Runs one statement on `client` for at most `timeoutMs`. Past it, the statement is cancelled
 * on the server (PostgreSQL's cancel request, on a connection of its own) and the connection
 * is marked broken, so that a statement the server had not run yet never runs afterwards.
 * Returns the pg result; the caller releases `client` normally when this resolves.
 */
export async function queryWithDeadline<R extends pg.QueryResultRow>(
  client: PoolClient,
  config: pg.QueryConfig,
  timeoutMs: number,
): Promise<pg.QueryResult<R>> {
  return withDeadline(client.query<R>(config), timeoutMs, `statement ${config.name ?? ''}`, () =>
    cancelActiveQuery(client),
  );
}

/** The few fields of node-postgres' client that a cancel request needs (not in its types). */
interface CancellableClient {
  host?: string;
  port?: number;
  activeQuery?: unknown;
}

/**
 * Sends PostgreSQL's cancel request for the statement `client` is running, the way
 * node-postgres does it (`Client#cancel`, from a second, unconnected client to the same host).
 * Best effort: a server that cannot be reached cannot run the statement either.
 */
export function cancelActiveQuery(client: PoolClient): void {
  const target = client as unknown as CancellableClient;
  if (!target.activeQuery) return;
  try {
    const canceller = new pg.Client({ host: target.host, port: target.port });
    const connection = (canceller as unknown as { connection: CancelConnection }).connection;
    // A server that does not answer must neither crash the process nor keep the socket.
    connection.on('error', () => undefined);
    setTimeout(() => connection.stream?.destroy(), CANCEL_SOCKET_MS).unref();
    (canceller as unknown as { cancel(c: unknown, q: unknown): void }).cancel(
      client,
      target.activeQuery,
    );
  } catch {
    // Nothing more can be done; the connection is dropped by the caller.
  }
}

/** How long the cancel request's own socket may live: it is answered at once, or never. */
const CANCEL_SOCKET_MS = 5_000;

interface CancelConnection {
  on(event: 'error', listener: () => void): void;
  stream?: { destroy(): void };
}
