import { existsSync, readFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { drizzle, type NodePgDatabase } from 'drizzle-orm/node-postgres';
import { type Pool } from 'pg';
import * as schema from './schema.js';

/** The app's one `pg.Pool`: the library's and Drizzle's, so that Drizzle joins each request. */
export const PG_POOL = Symbol('PG_POOL');
/** The Drizzle instance built on PG_POOL. */
export const DRIZZLE = Symbol('DRIZZLE');

export type Database = NodePgDatabase<typeof schema>;

export function createDatabase(pool: Pool): Database {
  return drizzle({ client: pool, schema });
}

/**
 * A file of the repository, found from this one's folder upwards: the same from the sources
 * (examples/drizzle-orders) and from the compiled files (dist/examples/drizzle-orders), which
 * tsc does not copy .sql files to.
 */
function repositoryFile(path: string): string {
  for (let dir = import.meta.dirname; ; dir = dirname(dir)) {
    if (existsSync(join(dir, path))) return join(dir, path);
    if (dirname(dir) === dir) throw new Error(`${path} not found above ${import.meta.dirname}`);
  }
}

/**
 * Creates the library's tables (its plain SQL schema, migrations/schema.sql) when they are
 * missing, then the app's (schema.sql). Under an advisory lock, so that instances starting
 * together do not run it twice; an app of your own would use its migration tool instead.
 */
export async function applySchema(pool: Pool): Promise<void> {
  const client = await pool.connect();
  try {
    await client.query('SELECT pg_advisory_lock(hashtext($1))', ['drizzle-orders schema']);
    const { rows } = await client.query<{ present: boolean }>(
      "SELECT to_regclass('idempotency_keys') IS NOT NULL AS present",
    );
    if (!rows[0].present) {
      await client.query(readFileSync(repositoryFile('migrations/schema.sql'), 'utf8'));
    }
    await client.query(readFileSync(repositoryFile('examples/drizzle-orders/schema.sql'), 'utf8'));
  } finally {
    await client.query('SELECT pg_advisory_unlock(hashtext($1))', ['drizzle-orders schema']);
    client.release();
  }
}
