import { type ClientConfig } from 'pg';
import { parse, toClientConfig } from 'pg-connection-string';

/** One host of a connection string that lists several, as libpq allows. */
export interface HostPort {
  host: string;
  port: number;
}

/** A `postgres://` connection string, read host by host as node-postgres reads one host. */
export interface ConnectionString {
  /** The hosts in the order listed: one, or several (`h1:5432,h2:5433`). */
  hosts: HostPort[];
  /**
   * For each host, in the same order, what node-postgres reads from a string naming that host
   * alone (TLS, `application_name`, `options`, credentials...), with `connect_timeout` as
   * `connectionTimeoutMillis`, which node-postgres leaves out of a string.
   */
  clients: ClientConfig[];
  /** `target_session_attrs=read-write`: only a host that accepts writes will do. */
  readWrite: boolean;
}

/** A connection string this library cannot honour as written: said at start-up, by name. */
export class InvalidConnectionStringError extends Error {
  constructor(message: string) {
    super(`postgresConnection(): ${message}`);
    this.name = 'InvalidConnectionStringError';
  }
}

/**
 * The parameters node-postgres reads from a connection string (pg-connection-string and pg's
 * ConnectionParameters), and the two this library adds for several hosts. A libpq parameter
 * that is not here (`keepalives`, `sslpassword`, `dbname`...) would be dropped without a word,
 * so it is refused: `sslmod=require` connecting in clear text is worse than not starting.
 */
export const CONNECTION_STRING_PARAMETERS: readonly string[] = [
  'user',
  'password',
  'host',
  'port',
  'ssl',
  'sslmode',
  'sslrootcert',
  'sslcert',
  'sslkey',
  'sslnegotiation',
  'uselibpqcompat',
  'application_name',
  'fallback_application_name',
  'options',
  'client_encoding',
  'replication',
  'statement_timeout',
  'lock_timeout',
  'idle_in_transaction_session_timeout',
  'query_timeout',
  'connect_timeout',
  'target_session_attrs',
];
const KNOWN = new Set(CONNECTION_STRING_PARAMETERS);

/** The `target_session_attrs` values honoured: libpq's others would need a standby's view. */
const SESSION_ATTRS = new Set(['any', 'read-write']);

/** `scheme://` `userinfo@` `host list` `/path?query#fragment`, as a URL parser splits them. */
const URL_SHAPE = /^(postgres(?:ql)?:\/\/)([^/?#]*)(.*)$/s;

/**
 * Reads a `postgres://` or `postgresql://` connection string that lists one host or several
 * (`postgres://u:p@h1:5432,h2:5433/db?sslmode=verify-full&target_session_attrs=read-write`).
 * Only the host list is split here; each host's string is then read by node-postgres's own
 * parser, so a parameter means for every host what it means for one (a password's escapes,
 * `sslmode`, `sslrootcert`...). Returns undefined for any other kind of string (a socket
 * path, `key=value` pairs): node-postgres reads those itself.
 *
 * @throws InvalidConnectionStringError for a parameter node-postgres does not read, a
 *   `target_session_attrs` other than `any` or `read-write`, or a malformed `connect_timeout`.
 */
export function parseConnectionString(url: string): ConnectionString | undefined {
  const match = URL_SHAPE.exec(url);
  if (!match) return undefined;
  const [, scheme, authority, rest] = match;
  // A URL parser takes the last "@" as the end of the credentials, as node-postgres does.
  const at = authority.lastIndexOf('@');
  const userinfo = authority.slice(0, at + 1);
  const hostList = authority.slice(at + 1).split(',');
  const params = new URLSearchParams(/\?([^#]*)/.exec(rest)?.[1] ?? '');
  checkParameters(params, hostList.length);

  const connectSeconds = params.get('connect_timeout');
  if (connectSeconds !== null && !/^\d+$/.test(connectSeconds)) {
    throw new InvalidConnectionStringError(
      `connect_timeout must be a whole number of seconds, got "${connectSeconds}"`,
    );
  }
  const attrs = params.get('target_session_attrs') ?? 'any';
  if (!SESSION_ATTRS.has(attrs)) {
    throw new InvalidConnectionStringError(
      `target_session_attrs=${attrs} is not supported: use read-write (the host that accepts ` +
        'writes) or any (the first host that answers)',
    );
  }

  const clients = hostList.map((entry) => {
    if (entry === '' && hostList.length > 1) {
      throw new InvalidConnectionStringError('the host list has an empty entry');
    }
    return clientConfig(`${scheme}${userinfo}${entry}${rest}`, Number(connectSeconds ?? 0));
  });
  return {
    hosts: clients.map((client) => ({ host: client.host ?? '', port: client.port ?? 5432 })),
    clients,
    readWrite: attrs === 'read-write',
  };
}

function checkParameters(params: URLSearchParams, hostCount: number): void {
  for (const name of new Set(params.keys())) {
    if (!KNOWN.has(name)) {
      throw new InvalidConnectionStringError(
        `the parameter "${name}" is not one node-postgres reads from a connection string, so ` +
          `it would be ignored; remove it or correct its name (read: ${CONNECTION_STRING_PARAMETERS.join(', ')})`,
      );
    }
    if (hostCount > 1 && (name === 'host' || name === 'port')) {
      throw new InvalidConnectionStringError(
        `the parameter "${name}" would stand for every host listed; list the hosts as ` +
          'postgres://user@host1:port1,host2:port2/database instead',
      );
    }
  }
}

/** What node-postgres reads from a one-host string, without the blanks it fills in. */
function clientConfig(oneHost: string, connectSeconds: number): ClientConfig {
  const config = toClientConfig(parse(oneHost));
  // An absent user or password is read as "": it would override the pool's own.
  if (!config.user) delete config.user;
  if (!config.password) delete config.password;
  // Read here instead: node-postgres reads neither from a string.
  delete (config as Record<string, unknown>).connect_timeout;
  delete (config as Record<string, unknown>).target_session_attrs;
  if (connectSeconds > 0) config.connectionTimeoutMillis = connectSeconds * 1000;
  return config;
}
