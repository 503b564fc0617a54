import { readFileSync } from 'node:fs';
import { type INestApplication, type Type } from '@nestjs/common';
import { Client, type Pool } from 'pg';
import { type AdapterName, bootstrapTestApp } from './bootstrap.js';
import { createTestDatabase, type TestDatabase } from './database.js';
import { createTestPool, endTestPool } from './test-pool.js';

/** An app on the pool seam, on a database of its own with the library's schema. */
export interface PoolApp {
  database: TestDatabase;
  /** A client of the database's owner, for set-up and for reading what was kept. */
  admin: Client;
  pool: Pool;
  app: INestApplication;
  /** Closes the app, the pool and the client, and drops the database. */
  close(): Promise<void>;
}

export interface PoolAppOptions {
  /** The module to start, whose IdempotencyModule is given `pool` (see `usePool`). */
  module: Type;
  /** Run after the schema, before the app starts, with the owner's client: the test's tables. */
  setup?: (admin: Client) => Promise<void>;
  /** The pool's size (one: every request meets the connection the one before gave back). */
  max?: number;
  /** Called with the pool before the app starts: the module's controllers use it. */
  usePool: (pool: Pool) => void;
  adapter?: AdapterName;
}

/** Creates the database, runs `migrations/schema.sql` and `setup`, starts the module. */
export async function startPoolApp(name: string, options: PoolAppOptions): Promise<PoolApp> {
  const database = await createTestDatabase(name);
  const admin = new Client({ connectionString: database.url });
  let pool: Pool | undefined;
  let app: INestApplication | undefined;
  const close = async () => {
    await app?.close();
    await endTestPool(pool);
    await admin.end().catch(() => undefined);
    await database.drop();
  };
  try {
    await admin.connect();
    await admin.query(readFileSync('migrations/schema.sql', 'utf8'));
    await options.setup?.(admin);
    pool = createTestPool({ connectionString: database.url, max: options.max ?? 2 });
    pool.on('error', () => undefined);
    options.usePool(pool);
    app = await bootstrapTestApp(options.module, options.adapter ?? 'express');
    return { database, admin, pool, app, close };
  } catch (error) {
    await close();
    throw error;
  }
}
