/**
 * The Redis database a BullMQ worker reads its jobs from, as part of their key's tenant
 * (lib/jobs/job-key.ts `jobTenant`): two queues of one name on two databases are two queues.
 */

/** `value` as a database index, as ioredis reads it (`parseInt(db, 10)`), else `undefined`. */
function dbIndex(value: unknown): number | undefined {
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

/** What the library reads of a job's worker (BullMQ's `Job` keeps it as `queue`). */
interface WorkerLike {
  opts?: { connection?: unknown };
  /** BullMQ 6: its backend, whose `client` is the live Redis client. */
  getBackend?: () => { client?: unknown } | undefined;
  /** BullMQ 5: the live Redis client. */
  client?: unknown;
}

/** The worker's live Redis client, where BullMQ exposes it; `undefined` where it cannot. */
async function liveClientOf(worker: WorkerLike): Promise<unknown> {
  try {
    const client =
      typeof worker.getBackend === 'function' ? worker.getBackend()?.client : worker.client;
    if (typeof (client as { then?: unknown } | undefined)?.then !== 'function') return undefined;
    return await (client as Promise<unknown>);
  } catch {
    return undefined;
  }
}

/**
 * The Redis database a job's worker reads it from: by its worker's live client, as the client
 * parsed its options (a `url`, a string `db`: every form agrees), else by the worker's
 * connection options (`redisDbOf`). 0 where the job does not carry its worker (a sandboxed
 * processor's job, a job-like object of the app's).
 */
export async function jobRedisDb(job: object): Promise<number> {
  const worker = (job as { queue?: WorkerLike }).queue;
  if (typeof worker !== 'object' || worker === null) return 0;
  const client = await liveClientOf(worker);
  return redisDbOf(client ?? worker.opts?.connection);
}
