import { existsSync, readFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { type Pool } from 'pg';

/** Any number: it only has to be the same in every instance of this app. */
const SCHEMA_LOCK = 7_300_417;

/**
 * `relative` found in this folder or one above it: the .sql files sit beside the sources, and
 * the compiled files run from dist/, a few folders away.
 */
function findUp(relative: string): string {
  for (let dir = import.meta.dirname; ; dir = dirname(dir)) {
    const file = join(dir, relative);
    if (existsSync(file)) return file;
    if (dirname(dir) === dir) throw new Error(`${relative} not found above ${import.meta.dirname}`);
  }
}

/**
 * The library's tables (its plain SQL schema, `migrations/schema.sql` of the package) and the
 * app's, each created when it is missing. Under an advisory lock: two instances starting at
 * once would otherwise both see the tables missing.
 */
export async function applySchema(pool: Pool): Promise<void> {
  const client = await pool.connect();
  try {
    await client.query('SELECT pg_advisory_lock($1)', [SCHEMA_LOCK]);
    const files: [table: string, file: string][] = [
      ['idempotency_keys', findUp('migrations/schema.sql')],
      ['orders', findUp('examples/kysely-orders/schema.sql')],
    ];
    for (const [table, file] of files) {
      const { rows } = await client.query<{ found: string | null }>(
        'SELECT to_regclass($1) AS found',
        [table],
      );
      if (rows[0].found === null) await client.query(readFileSync(file, 'utf8'));
    }
  } finally {
    await client.query('SELECT pg_advisory_unlock($1)', [SCHEMA_LOCK]).catch(() => undefined);
    client.release();
  }
}
