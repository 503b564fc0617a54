import { type INestApplication } from '@nestjs/common';
import { Client } from 'pg';
import { type AdapterName, createTestApp, SIDE_EFFECTS_DDL } from './test-app.js';
import { createTestDatabase, type TestDatabase } from './database.js';
import { type IdempotencyModuleBaseOptions } from '../../lib/index.js';

/** One test file's world: its own database, the test app on it, and a client to count rows. */
export interface Scenario {
  app: INestApplication;
  db: Client;
  database: TestDatabase;
  server: () => ReturnType<INestApplication['getHttpServer']>;
  sideEffects: (route?: string) => Promise<number>;
  close(): Promise<void>;
}

export async function startScenario(
  label: string,
  adapter: AdapterName,
  idempotency?: IdempotencyModuleBaseOptions,
): Promise<Scenario> {
  const database = await createTestDatabase(`${label}_${adapter}`);
  const db = new Client({ connectionString: database.url });
  await db.connect();
  await db.query(SIDE_EFFECTS_DDL);
  const app = await createTestApp({ databaseUrl: database.url, adapter, idempotency });
  return {
    app,
    db,
    database,
    server: () => app.getHttpServer(),
    sideEffects: async (route?: string) => {
      const { rows } = await db.query<{ n: string }>(
        route === undefined
          ? 'SELECT count(*) AS n FROM side_effects'
          : 'SELECT count(*) AS n FROM side_effects WHERE route = $1',
        route === undefined ? [] : [route],
      );
      return Number(rows[0].n);
    },
    close: async () => {
      await app.close();
      await db.end();
      await database.drop();
    },
  };
}
