import pg from 'pg';

/** One host of a connection string that lists several, as libpq allows. */
export interface HostPort {
  host: string;
  port: number;
}

/** A libpq connection string, its hosts apart. */
export interface MultiHostUrl {
  hosts: HostPort[];
  user?: string;
  password?: string;
  database?: string;
  /** `target_session_attrs=read-write`: only a host that accepts writes will do. */
  readWrite: boolean;
}

const URL_SHAPE = /^(postgres(?:ql)?):\/\/(?:([^@/]*)@)?([^/?]*)(\/[^?]*)?(\?.*)?$/;

/**
 * Reads a connection string that may list several hosts (`postgres://u:p@h1:5432,h2:5433/db
 * ?target_session_attrs=read-write`), which node-postgres and TypeORM do not: they take one
 * host. Returns undefined for a string of one host, which they read themselves.
 */
export function parseMultiHostUrl(url: string): MultiHostUrl | undefined {
  const match = URL_SHAPE.exec(url);
  if (!match || !match[3].includes(',')) return undefined;
  const [, , credentials, hostList, path, query] = match;
  const [user, password] = (credentials ?? '').split(':').map((part) => decodeURIComponent(part));
  const params = new URLSearchParams((query ?? '').slice(1));
  const hosts = hostList.split(',').map((entry): HostPort => {
    const bracketed = /^\[([^\]]+)\](?::(\d+))?$/.exec(entry);
    if (bracketed) return { host: bracketed[1], port: Number(bracketed[2] ?? 5432) };
    const [host, port] = entry.split(':');
    return { host, port: Number(port || 5432) };
  });
  return {
    hosts,
    user: user || undefined,
    password: password || undefined,
    database: path && path.length > 1 ? decodeURIComponent(path.slice(1)) : undefined,
    readWrite: params.get('target_session_attrs') === 'read-write',
  };
}

type ConnectCallback = ((err: Error) => void) | ((err: null, client: pg.Client) => void);

/**
 * A node-postgres client that connects to the first of several hosts that answers, and with
 * `readWrite` to the first whose sessions accept writes (`transaction_read_only` is `off`:
 * not `pg_is_in_recovery()`, which a standby just promoted already denies while it still
 * refuses writes). Given to the pool (TypeORM's `extra.Client`), every new pooled connection
 * finds the primary again, so the app follows it across a failover; connections to the old
 * one fail, are dropped, and their requests get a 503 to retry.
 */
export function writableHostClient(
  hosts: readonly HostPort[],
  readWrite: boolean,
): typeof pg.Client {
  return class WritableHostClient extends pg.Client {
    override connect(): Promise<pg.Client>;
    override connect(callback: ConnectCallback): void;
    override connect(callback?: ConnectCallback): Promise<pg.Client> | void {
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
        connectionParameters: pg.ClientConfig & { host: string; port: number };
      };
      const failures: string[] = [];
      for (const { host, port } of hosts) {
        // The password is not enumerable on node-postgres' parameters: it is passed apart.
        const { password } = self.connectionParameters;
        const probe = new pg.Client({ ...self.connectionParameters, password, host, port });
        probe.on('error', () => undefined);
        try {
          await probe.connect();
          const writable =
            !readWrite ||
            (await probe.query<{ transaction_read_only: string }>('SHOW transaction_read_only'))
              .rows[0].transaction_read_only === 'off';
          if (writable) {
            self.host = self.connectionParameters.host = host;
            self.port = self.connectionParameters.port = port;
            return;
          }
          failures.push(`${host}:${port} accepts no writes`);
        } catch (error) {
          failures.push(`${host}:${port} ${String(error)}`);
        } finally {
          await probe.end().catch(() => undefined);
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
 * TypeORM's PostgreSQL options for a connection string, one host or several: with several,
 * the pool's clients find the host that accepts writes, and follow it across a failover.
 *
 * @example TypeOrmModule.forRoot({ type: 'postgres', ...postgresConnection(process.env.DATABASE_URL!) })
 */
export function postgresConnection(url: string): {
  url?: string;
  host?: string;
  port?: number;
  username?: string;
  password?: string;
  database?: string;
  extra?: { Client: typeof pg.Client };
} {
  const parsed = parseMultiHostUrl(url);
  if (!parsed) return { url };
  return {
    host: parsed.hosts[0].host,
    port: parsed.hosts[0].port,
    username: parsed.user,
    password: parsed.password,
    database: parsed.database,
    extra: { Client: writableHostClient(parsed.hosts, parsed.readWrite) },
  };
}
