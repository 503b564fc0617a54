import pg from 'pg';
import { markLibraryClient } from './own-connection.js';
import { type HostPort, parseConnectionString } from './connection-string.js';

/** A libpq connection string that lists several hosts, read host by host. */
export interface MultiHostUrl {
  hosts: HostPort[];
  user?: string;
  password?: string;
  database?: string;
  /** `target_session_attrs=read-write`: only a host that accepts writes will do. */
  readWrite: boolean;
  /** For each host, what node-postgres reads from a string naming it alone (TLS included). */
  clients: pg.ClientConfig[];
}

/**
 * How long one host may take to answer when neither the connection string (`connect_timeout`)
 * nor the pool (`connectionTimeoutMillis`, TypeORM's `connectTimeoutMS`) says: a host that
 * accepts and never answers must not hold the hosts after it back for ever (libpq and
 * node-postgres wait without end). Ten seconds is far above a TLS handshake on a loaded host.
 */
export const DEFAULT_CONNECT_TIMEOUT_MS = 10_000;

/**
 * Reads a connection string that lists several hosts (`postgres://u:p@h1:5432,h2:5433/db
 * ?target_session_attrs=read-write`), which node-postgres and TypeORM do not: they take one
 * host. Returns undefined for a string of one host, which they read themselves.
 *
 * @throws InvalidConnectionStringError for a parameter node-postgres would ignore.
 */
export function parseMultiHostUrl(url: string): MultiHostUrl | undefined {
  const parsed = parseConnectionString(url);
  if (!parsed || parsed.hosts.length < 2) return undefined;
  const [first] = parsed.clients;
  return {
    hosts: parsed.hosts,
    user: first.user,
    password: passwordOf(first),
    database: first.database,
    readWrite: parsed.readWrite,
    clients: parsed.clients,
  };
}

/** A string's password (pg also takes a function, which a string never gives). */
function passwordOf(config: pg.ClientConfig): string | undefined {
  return typeof config.password === 'string' ? config.password : undefined;
}

/**
 * The order in which to try `count` hosts: the one that last answered as wanted first (the
 * primary stays where a failover put it, and no new connection waits out a dead host again),
 * then the others in the order listed, as libpq tries them.
 */
export function probeOrder(count: number, lastGood: number | undefined): number[] {
  const listed = Array.from({ length: count }, (_, index) => index);
  if (lastGood === undefined || lastGood < 0 || lastGood >= count) return listed;
  return [lastGood, ...listed.filter((index) => index !== lastGood)];
}

/**
 * The bound on one host's answer: the connection string's `connect_timeout`, else the pool's
 * `connectionTimeoutMillis`, else {@link DEFAULT_CONNECT_TIMEOUT_MS} (0 means unset, as in pg).
 */
export function connectTimeoutMs(fromUrl?: number, fromPool?: number): number {
  return fromUrl || fromPool || DEFAULT_CONNECT_TIMEOUT_MS;
}

type ConnectCallback = ((err: Error) => void) | ((err: null, client: pg.Client) => void);

/** What each client was configured with, its pool's options and the string's merged. */
const settingsOf = new WeakMap<pg.Client, pg.ClientConfig>();

/**
 * A node-postgres client that connects to the first of several hosts that answers, and with
 * `readWrite` to the first whose sessions accept writes (`transaction_read_only` is `off`:
 * not `pg_is_in_recovery()`, which a standby just promoted already denies while it still
 * refuses writes). Given to the pool (TypeORM's `extra.Client`), every new pooled connection
 * finds the primary again, so the app follows it across a failover; connections to the old
 * one fail, are dropped, and their requests get a 503 to retry.
 *
 * `clients` holds each host's parameters as node-postgres reads them from the connection
 * string (TLS, `application_name`, `options`, credentials, `connectionTimeoutMillis`): they
 * apply to the probes and to the connection alike, over what the pool passes. Each probe,
 * its query included, is bounded by {@link connectTimeoutMs}.
 */
export function writableHostClient(
  hosts: readonly HostPort[],
  readWrite: boolean,
  clients: readonly pg.ClientConfig[] = [],
): typeof pg.Client {
  // Shared by every client of this class (one pool, or several on one string).
  let lastGood: number | undefined;
  return class WritableHostClient extends pg.Client {
    constructor(config?: string | pg.ClientConfig) {
      const given: pg.ClientConfig =
        typeof config === 'string' ? { connectionString: config } : { ...config };
      const settings: pg.ClientConfig = {
        ...given,
        ...clients[0],
        connectionTimeoutMillis: connectTimeoutMs(
          clients[0]?.connectionTimeoutMillis,
          given.connectionTimeoutMillis,
        ),
      };
      super(settings);
      settingsOf.set(this, settings);
    }

    override connect(): Promise<pg.Client>;
    override connect(callback: ConnectCallback): void;
    override connect(callback?: ConnectCallback): Promise<pg.Client> | void {
      // If the pool's own timer ended this client's socket while the probes ran (one hung host
      // takes a whole timeout), connecting opens it again (net.Socket#connect reconnects a
      // socket once 'close' was emitted): the pool still waits for this callback, and gets a
      // working client, within about two timeouts.
      const connected = this.chooseHost().then(() => super.connect());
      if (!callback) return connected;
      const done = callback as (err: Error | null, client?: pg.Client) => void;
      connected.then(
        (client) => done(null, client),
        (error: Error) => done(error),
      );
    }

    /** Probes each host in turn, on a connection of its own, and points this client at one. */
    async chooseHost(): Promise<void> {
      const self = this as unknown as {
        host: string;
        port: number;
        connectionParameters: { host: string; port: number };
      };
      const settings = settingsOf.get(this) ?? {};
      const timeout = settings.connectionTimeoutMillis;
      const failures: string[] = [];
      for (const index of probeOrder(hosts.length, lastGood)) {
        const { host, port } = hosts[index];
        const probe = new pg.Client({
          ...settings,
          ...clients[index],
          host,
          port,
          // Bounded, both the connection and the question: a host that accepts and never
          // answers is passed over after one timeout, as libpq's connect_timeout does.
          connectionTimeoutMillis: timeout,
          query_timeout: timeout,
        });
        markLibraryClient(probe);
        probe.on('error', () => undefined);
        try {
          await probe.connect();
          const writable =
            !readWrite ||
            (await probe.query<{ transaction_read_only: string }>('SHOW transaction_read_only'))
              .rows[0].transaction_read_only === 'off';
          if (writable) {
            lastGood = index;
            self.host = self.connectionParameters.host = host;
            self.port = self.connectionParameters.port = port;
            return;
          }
          failures.push(`${host}:${port} accepts no writes`);
        } catch (error) {
          failures.push(`${host}:${port} ${String(error)}`);
        } finally {
          await endProbe(probe, timeout);
        }
      }
      // SQLSTATE 08001: the library reads it as "the database cannot be reached" (a 503).
      throw Object.assign(
        new Error(`no host ${readWrite ? 'accepts writes' : 'answers'}: ${failures.join('; ')}`),
        { code: '08001' },
      );
    }
  };
}

/**
 * Ends a probe politely, and at the latest after `ms` ends its socket: a polite end waits for
 * the server's goodbye, which a host that hangs never sends.
 */
async function endProbe(probe: pg.Client, ms = DEFAULT_CONNECT_TIMEOUT_MS): Promise<void> {
  let timer: NodeJS.Timeout | undefined;
  const late = new Promise<void>((resolve) => (timer = setTimeout(resolve, ms)));
  await Promise.race([probe.end().catch(() => undefined), late]);
  clearTimeout(timer);
  (
    probe as unknown as { connection?: { stream?: { destroy(): void } } }
  ).connection?.stream?.destroy();
}

/** TypeORM's PostgreSQL connection options that {@link postgresConnection} fills in. */
export interface PostgresConnectionOptions {
  url?: string;
  host?: string;
  port?: number;
  username?: string;
  password?: string;
  database?: string;
  /** Given to the pool: the client that picks a host, and `connect_timeout` in milliseconds. */
  extra?: { Client?: typeof pg.Client; connectionTimeoutMillis?: number };
}

/**
 * TypeORM's PostgreSQL options for a connection string, one host or several: with several
 * (or `target_session_attrs=read-write`), the pool's clients find the host that accepts
 * writes, and follow it across a failover. Every parameter node-postgres reads from a string
 * holds for every host; `connect_timeout` becomes the pool's `connectionTimeoutMillis`; a
 * parameter node-postgres would ignore is refused at start-up, by name.
 *
 * @example TypeOrmModule.forRoot({ type: 'postgres', ...postgresConnection(process.env.DATABASE_URL!) })
 * @throws InvalidConnectionStringError for a parameter node-postgres would ignore.
 */
export function postgresConnection(url: string): PostgresConnectionOptions {
  const parsed = parseConnectionString(url);
  if (!parsed) return { url };
  const [first] = parsed.clients;
  const timeout = first.connectionTimeoutMillis;
  const pool = timeout ? { connectionTimeoutMillis: timeout } : undefined;
  if (parsed.hosts.length === 1 && !parsed.readWrite) return pool ? { url, extra: pool } : { url };
  return {
    host: parsed.hosts[0].host,
    port: parsed.hosts[0].port,
    username: first.user,
    password: passwordOf(first),
    database: first.database,
    extra: { ...pool, Client: writableHostClient(parsed.hosts, parsed.readWrite, parsed.clients) },
  };
}
