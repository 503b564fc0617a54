import { existsSync, readFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { type Pool } from 'pg';

/** The repository's root: the sources and their compiled copy in dist/ sit at other depths. */
function repositoryRoot(): string {
  let dir = dirname(fileURLToPath(import.meta.url));
  while (!existsSync(join(dir, 'package.json'))) {
    const parent = dirname(dir);
    if (parent === dir) throw new Error('package.json not found above the orders example');
    dir = parent;
  }
  return dir;
}

/** Any constant: the lock that makes instances starting together migrate one at a time. */
const MIGRATION_LOCK = 727_001;

/**
 * Creates the library's tables (its migrations/schema.sql, plain SQL: this app has no TypeORM)
 * and the app's (schema.sql), once, under an advisory lock so that instances may start at once.
 * In an app of your own the library's file is `node_modules/nestjs-idempotency-pg/migrations/schema.sql`.
 */
export async function migrate(pool: Pool): Promise<void> {
  const root = repositoryRoot();
  const client = await pool.connect();
  try {
    await client.query('SELECT pg_advisory_lock($1)', [MIGRATION_LOCK]);
    const { rows } = await client.query<{ present: boolean }>(
      `SELECT to_regclass('idempotency_keys') IS NOT NULL AS present`,
    );
    if (!rows[0].present) {
      await client.query(readFileSync(join(root, 'migrations/schema.sql'), 'utf8'));
    }
    await client.query(readFileSync(join(root, 'examples/prisma-orders/schema.sql'), 'utf8'));
  } finally {
    await client.query('SELECT pg_advisory_unlock($1)', [MIGRATION_LOCK]).catch(() => undefined);
    client.release();
  }
}
