import { readFileSync } from 'node:fs';
import { Client, type QueryResultRow } from 'pg';
import { createTestDatabase, type TestDatabase } from './database.js';
import { OUTAGE_DDL } from './outage-app.js';
import { TcpProxy } from './tcp-proxy.js';

/**
 * The database of an outage file's cells: its own, with the library's schema (the TypeORM app
 * migrates it itself) and the rows the handlers write, reached by the app through a `TcpProxy`
 * the test breaks. Reads go on a connection of their own, straight to PostgreSQL: the faults
 * terminate every other one.
 */
export interface OutageDatabase {
  database: TestDatabase;
  proxy: TcpProxy;
  /** The database's URL through the proxy: the app's. */
  viaProxy: string;
  /** The rows written with `tag`, by their `n`. */
  rows(tag: string): Promise<number[]>;
  read<R extends QueryResultRow>(text: string, values?: unknown[]): Promise<R[]>;
  drop(): Promise<void>;
}

export async function createOutageDatabase(
  label: string,
  typeorm: boolean,
): Promise<OutageDatabase> {
  const database = await createTestDatabase(label);
  const db = new Client({ connectionString: database.url });
  await db.connect();
  try {
    if (!typeorm) await db.query(readFileSync('migrations/schema.sql', 'utf8'));
    await db.query(OUTAGE_DDL);
  } finally {
    await db.end();
  }
  const target = new URL(database.url);
  const proxy = new TcpProxy(target.hostname, Number(target.port || 5432));
  await proxy.start();
  const viaProxy = new URL(database.url);
  viaProxy.host = `127.0.0.1:${proxy.port}`;

  const read = async <R extends QueryResultRow>(text: string, values: unknown[] = []) => {
    const reader = new Client({ connectionString: database.url });
    await reader.connect();
    try {
      return (await reader.query<R>(text, values)).rows;
    } finally {
      await reader.end();
    }
  };
  return {
    database,
    proxy,
    viaProxy: viaProxy.toString(),
    read,
    rows: async (tag) =>
      (await read<{ n: number }>('SELECT n FROM outage_rows WHERE tag = $1 ORDER BY n', [tag])).map(
        (row) => row.n,
      ),
    drop: async () => {
      await proxy.stop();
      await database.drop();
    },
  };
}
