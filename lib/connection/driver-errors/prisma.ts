/**
 * The database's failure inside Prisma 7's errors (the engine-free client on
 * `@prisma/adapter-pg`), so that the library classifies it as it does node-postgres' own: a
 * serialization failure is transient (503 `database_transient`), a terminated connection means
 * the store is unavailable, a unique violation is the handler's.
 *
 * Prisma does not keep node-postgres' error. Its pg adapter turns it into a
 * `DriverAdapterError` whose `cause` is a plain description: `originalCode` (the SQLSTATE) and
 * `originalMessage` for an error PostgreSQL sent, or only a `kind` for a socket's
 * (`ConnectionClosed` for ECONNRESET, `DatabaseNotReachable` for ECONNREFUSED or ENOTFOUND,
 * `SocketTimeout` for ETIMEDOUT). The client then wraps that in a
 * `PrismaClientKnownRequestError` (`meta.driverAdapterError`), or, at the start of a
 * transaction, throws it as it is. So what this returns is rebuilt from that description: an
 * error with the shape of node-postgres' (`code`, `severity`, `message`), or of the socket's
 * (`code` such as `ECONNRESET`). Errors node-postgres raises without a code (`Connection
 * terminated unexpectedly`, `Client has encountered a connection error and is not queryable`)
 * pass through Prisma unwrapped: they are not this function's to unwrap.
 *
 * Read by shape, never `instanceof`: the app's Prisma may be another copy than any the library
 * could import, and the library does not depend on Prisma.
 */

/** What `@prisma/adapter-pg` keeps of a driver's error (its `DriverAdapterError.cause`). */
interface AdapterErrorCause {
  kind: string;
  originalCode?: unknown;
  originalMessage?: unknown;
  severity?: unknown;
  detail?: unknown;
}

/** The socket's error code each of the adapter's socket kinds was made from. */
const SOCKET_KINDS: Record<string, string> = {
  ConnectionClosed: 'ECONNRESET',
  DatabaseNotReachable: 'ECONNREFUSED',
  SocketTimeout: 'ETIMEDOUT',
};

/** The database's failure rebuilt from what Prisma kept of it. */
export class PrismaDriverFailure extends Error {
  constructor(
    message: string,
    /** The SQLSTATE, or the socket's error code. */
    readonly code: string,
    /** PostgreSQL's severity (`ERROR`, `FATAL`); absent for a socket's failure. */
    readonly severity?: string,
    readonly detail?: string,
  ) {
    super(message);
    this.name = 'PrismaDriverFailure';
  }
}

/** The cause of a `DriverAdapterError` (itself, or in a Prisma client error's `meta`). */
function adapterCause(error: unknown): AdapterErrorCause | undefined {
  if (typeof error !== 'object' || error === null) return undefined;
  const { name, cause, meta } = error as { name?: unknown; cause?: unknown; meta?: unknown };
  if (name === 'DriverAdapterError') {
    return typeof cause === 'object' &&
      cause !== null &&
      typeof (cause as { kind?: unknown }).kind === 'string'
      ? (cause as AdapterErrorCause)
      : undefined;
  }
  if (typeof name === 'string' && name.startsWith('PrismaClient') && typeof meta === 'object') {
    return adapterCause((meta as { driverAdapterError?: unknown } | null)?.driverAdapterError);
  }
  return undefined;
}

/**
 * The database's error inside a Prisma error (see above), else undefined.
 *
 * @example
 * try { await prisma.order.create({ data }); } catch (error) {
 *   prismaCause(error); // PrismaDriverFailure { code: '40001', severity: 'ERROR', ... }
 * }
 */
export function prismaCause(error: unknown): unknown {
  const cause = adapterCause(error);
  if (!cause) return undefined;
  const { kind, originalCode, originalMessage, severity, detail } = cause;
  if (typeof originalCode === 'string') {
    return new PrismaDriverFailure(
      typeof originalMessage === 'string' ? originalMessage : kind,
      originalCode,
      // Only the adapter's catch-all kind ('postgres') keeps the severity; the server's
      // errors it names (a unique violation, a serialization failure...) are ERRORs.
      typeof severity === 'string' ? severity : 'ERROR',
      typeof detail === 'string' ? detail : undefined,
    );
  }
  const socketCode = SOCKET_KINDS[kind];
  return socketCode ? new PrismaDriverFailure(`${kind} (${socketCode})`, socketCode) : undefined;
}
