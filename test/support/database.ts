import { randomBytes } from 'node:crypto';
import { Client } from 'pg';

/** A database of a test file's own, created on the test server and dropped at the end. */
export interface TestDatabase {
  url: string;
  name: string;
  drop(): Promise<void>;
}

export function adminUrl(): string {
  const url = process.env.TEST_DATABASE_URL;
  if (!url) throw new Error('TEST_DATABASE_URL is not set: run the tests through jest (npm test)');
  return url;
}

async function withAdmin<T>(run: (client: Client) => Promise<T>): Promise<T> {
  const client = new Client({ connectionString: adminUrl() });
  await client.connect();
  try {
    return await run(client);
  } finally {
    await client.end();
  }
}

/** Creates an empty database named after the test file, so a leftover one says whose it is. */
export async function createTestDatabase(label: string): Promise<TestDatabase> {
  const name = `idem_${label.replace(/[^a-z0-9]/gi, '_').toLowerCase()}_${randomBytes(4).toString('hex')}`;
  await withAdmin((client) => client.query(`CREATE DATABASE ${name}`));
  const url = new URL(adminUrl());
  url.pathname = `/${name}`;
  return {
    url: url.toString(),
    name,
    drop: () => dropTestDatabase(name),
  };
}

/** How long `drop()` waits for the database's last sessions to end before it kills them. */
const SESSIONS_GONE_WITHIN_MS = 3000;

/**
 * Drops a test database once its sessions have ended, killing those still there after
 * `SESSIONS_GONE_WITHIN_MS`. A pool ended with `pool.end()` alone (not `endTestPool`) has sent
 * each backend its Terminate, but on a busy machine a backend may not have read it yet: the
 * drop's FORCE would kill it, and its FATAL 57P01 would reach a client whose pool re-emits it
 * as an `error` no one listens to any more, crashing whatever test runs next in the process.
 * Waiting for such sessions first keeps one file's clean-up out of the next file's results.
 */
export async function dropTestDatabase(name: string, waitMs = SESSIONS_GONE_WITHIN_MS) {
  await withAdmin(async (client) => {
    const until = Date.now() + waitMs;
    for (;;) {
      const { rows } = await client.query<{ n: number }>(
        'SELECT count(*)::int AS n FROM pg_stat_activity WHERE datname = $1 AND pid <> pg_backend_pid()',
        [name],
      );
      if (rows[0].n === 0 || Date.now() >= until) break;
      await new Promise((resolve) => setTimeout(resolve, 50));
    }
    await client.query(`DROP DATABASE IF EXISTS ${name} WITH (FORCE)`);
  });
}
