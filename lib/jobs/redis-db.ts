/**
 * The Redis database a BullMQ worker reads its jobs from, as part of their key's tenant
 * (lib/jobs/job-key.ts `jobTenant`): two queues of one name on two databases are two queues.
 */

/** `value` as a database index, as ioredis reads it (`parseInt(db, 10)`), else `undefined`. */
export function dbIndex(value: unknown): number | undefined {
  const db = typeof value === 'string' ? Number.parseInt(value, 10) : value;
  return typeof db === 'number' && Number.isSafeInteger(db) && db >= 0 ? db : undefined;
}

/**
 * The database a Redis URL names, as ioredis' `parseURL` reads it: the path of a `redis://`,
 * `rediss://` or protocol-relative (`//host/4`) URL, else its `?db=` (a Unix socket's too:
 * `/tmp/redis.sock?db=4`); `undefined` where it names none.
 */
export function urlDbOf(url: string): number | undefined {
  const hasProtocol = /^rediss?:\/\//i.test(url);
  const relative = url.startsWith('//');
  let parsed: URL;
  try {
    if (url.startsWith('/') && !relative) parsed = new URL(url, 'unix://socket');
    else parsed = new URL(hasProtocol ? url : `redis:${relative ? '' : '//'}${url}`);
  } catch {
    return undefined;
  }
  const path = (hasProtocol || relative) && parsed.pathname.length > 1 ? parsed.pathname : '';
  return dbIndex(path.slice(1) || (parsed.searchParams.get('db') ?? undefined));
}

/**
 * The Redis database of a BullMQ connection (a pure decision), read as its client reads it:
 * a client's (ioredis', or BullMQ's adapter of node-redis) from its `.options` as it parsed
 * them; options' from their `url` (its path, else its `?db=`: ioredis takes the URL before
 * the other options, BullMQ's `new IORedis(url, rest)`), else their `db` (a number, or a
 * string as a configuration reads it: ioredis parses it), else node-redis' `database`. 0,
 * Redis' default, where it names none (a cluster has only database 0) or none Redis would take.
 */
export function redisDbOf(connection: unknown): number {
  if (typeof connection !== 'object' || connection === null) return 0;
  const { options } = connection as { options?: unknown };
  const given = (typeof options === 'object' && options !== null ? options : connection) as {
    url?: unknown;
    db?: unknown;
    database?: unknown;
  };
  const fromUrl = typeof given.url === 'string' ? urlDbOf(given.url) : undefined;
  return fromUrl ?? dbIndex(given.db) ?? dbIndex(given.database) ?? 0;
}
