import pg, { type Pool, type PoolConfig } from 'pg';

/** Each test pool's connections, as promises that resolve once their socket has closed. */
const closing = new WeakMap<Pool, Promise<void>[]>();

/** A node-postgres pool whose `endTestPool` waits for every connection it ever opened. */
export function createTestPool(config: PoolConfig): Pool {
  const pool = new pg.Pool(config);
  const ends: Promise<void>[] = [];
  closing.set(pool, ends);
  pool.on('connect', (client) => {
    ends.push(new Promise((resolve) => client.once('end', () => resolve())));
  });
  return pool;
}

/**
 * Ends `pool` and waits until each of its connections is closed, not only removed from it.
 * `pool.end()` resolves once the pool has sent each client its Terminate; a backend that has
 * not read it yet (a busy machine) is still there when the file's `DROP DATABASE ... WITH
 * (FORCE)` runs, which kills it: its FATAL 57P01 reaches the ending client, whose pool re-emits
 * it as an `error` nobody listens to any more, and the process crashes in whatever test runs.
 * Once the sockets are closed, no backend is left for the drop to kill.
 */
export async function endTestPool(pool: Pool | undefined): Promise<void> {
  if (!pool) return;
  await pool.end();
  await Promise.all(closing.get(pool) ?? []);
}
