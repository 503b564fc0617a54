import { PrismaPg } from '@prisma/adapter-pg';
import { sql as drizzleSql } from 'drizzle-orm';
import { drizzle } from 'drizzle-orm/node-postgres';
import { Kysely, PostgresDialect, sql as kyselySql } from 'kysely';
import { type Pool } from 'pg';
import { DataSource, type EntityManager } from 'typeorm';
import { PrismaClient } from '../../examples/prisma-orders/generated/client.js';
import {
  type DataLayer,
  poolDataLayer,
  runInOwnTransaction,
  typeOrmDataLayer,
} from '../../lib/data-layers/data-layer.js';
import { type DataLayerProbe, proxiedPool } from './outage-faults.js';
import { type TcpProxy } from './tcp-proxy.js';

/** The data layers the library joins, each driven by its own API (outage-faults.ts). */
export type LayerName = 'pg' | 'TypeORM' | 'Prisma' | 'Drizzle' | 'Kysely';
export const LAYERS: LayerName[] = ['pg', 'TypeORM', 'Prisma', 'Drizzle', 'Kysely'];

/**
 * The library's bound on its own waits (the connection, BEGIN, COMMIT): short, so that a
 * connect that hangs ends in the table's time.
 */
const TIMEOUT_MS = 1500;

/**
 * A data layer's calls as a handler's run inside the library: each call is the work of a
 * transaction of the library's data layer (`runInOwnTransaction`, as `ProcessedMessages` and
 * phases of a request with no key run theirs), so that the data layer meets the library's
 * connections exactly as it does under `@Idempotent()`.
 */
export function probeOf(layer: LayerName, proxy: TcpProxy, databaseUrl: string): DataLayerProbe {
  if (layer === 'TypeORM') return typeOrmProbe(proxy, databaseUrl);
  const pool = proxiedPool(proxy, databaseUrl);
  const library = poolDataLayer(pool);
  const probe = {
    pg: pgProbe,
    Prisma: prismaProbe,
    Drizzle: drizzleProbe,
    Kysely: kyselyProbe,
  }[layer](pool);
  return throughLibrary(probe, library);
}

function throughLibrary(probe: DataLayerProbe, library: DataLayer): DataLayerProbe {
  const run = <T>(work: () => Promise<T>) =>
    runInOwnTransaction(library.transaction(TIMEOUT_MS, true, false), work);
  return {
    statement: () => run(() => probe.statement()),
    sleep: (seconds) => run(() => probe.sleep(seconds)),
    transaction: (between) => run(() => probe.transaction(between)),
    end: probe.end,
    ready: probe.ready,
  };
}

function once(end: () => Promise<void>): () => Promise<void> {
  let ended: Promise<void> | undefined;
  return () => (ended ??= end());
}

function pgProbe(pool: Pool): DataLayerProbe {
  return {
    statement: () => pool.query('SELECT 1'),
    sleep: (seconds) => pool.query('SELECT 1 FROM pg_sleep($1)', [seconds]),
    async transaction(between) {
      const client = await pool.connect();
      let failure: unknown;
      try {
        await client.query('BEGIN');
        await client.query('INSERT INTO outage_probe VALUES (1)');
        await between();
        await client.query('INSERT INTO outage_probe VALUES (2)');
        await client.query('COMMIT');
      } catch (error) {
        failure = error;
        throw error;
      } finally {
        client.release(failure instanceof Error ? failure : undefined);
      }
    },
    end: once(() => pool.end()),
  };
}

function typeOrmProbe(proxy: TcpProxy, databaseUrl: string): DataLayerProbe {
  const url = new URL(databaseUrl);
  url.host = `127.0.0.1:${proxy.port}`;
  const dataSource = new DataSource({
    type: 'postgres',
    url: url.toString(),
    connectTimeoutMS: 500,
    // Its idle connections close at once, so that a fault meets a new connection's connect.
    extra: { max: 4, idleTimeoutMillis: 1 },
  });
  const ready = dataSource.initialize();
  const library = typeOrmDataLayer(() => dataSource);
  const run = async <T>(work: (manager: EntityManager) => Promise<T>) => {
    await ready;
    return runInOwnTransaction(library.transaction(TIMEOUT_MS, true, false), work);
  };
  return {
    ready: async () => {
      await ready;
      await new Promise((resolve) => setTimeout(resolve, 100));
    },
    statement: () => run((manager) => manager.query('SELECT 1')),
    sleep: (seconds) => run((manager) => manager.query('SELECT 1 FROM pg_sleep($1)', [seconds])),
    transaction: (between) =>
      run(async (manager) => {
        await manager.query('INSERT INTO outage_probe VALUES (1)');
        await between();
        await manager.query('INSERT INTO outage_probe VALUES (2)');
      }),
    end: once(async () => {
      await ready.catch(() => undefined);
      if (dataSource.isInitialized) await dataSource.destroy();
    }),
  };
}

function prismaProbe(pool: Pool): DataLayerProbe {
  const prisma = new PrismaClient({ adapter: new PrismaPg(pool) });
  return {
    statement: () => prisma.$queryRawUnsafe('SELECT 1'),
    sleep: (seconds) => prisma.$queryRawUnsafe(`SELECT 1 FROM pg_sleep(${Number(seconds)})`),
    transaction: (between) =>
      prisma.$transaction(
        async (tx) => {
          await tx.$executeRawUnsafe('INSERT INTO outage_probe VALUES (1)');
          await between();
          await tx.$executeRawUnsafe('INSERT INTO outage_probe VALUES (2)');
        },
        { timeout: 20_000 },
      ),
    end: once(async () => {
      await prisma.$disconnect();
      await pool.end();
    }),
  };
}

function drizzleProbe(pool: Pool): DataLayerProbe {
  const db = drizzle({ client: pool });
  return {
    statement: () => db.execute(drizzleSql`SELECT 1`),
    sleep: (seconds) => db.execute(drizzleSql`SELECT 1 FROM pg_sleep(${seconds})`),
    transaction: (between) =>
      db.transaction(async (tx) => {
        await tx.execute(drizzleSql`INSERT INTO outage_probe VALUES (1)`);
        await between();
        await tx.execute(drizzleSql`INSERT INTO outage_probe VALUES (2)`);
      }),
    end: once(() => pool.end()),
  };
}

function kyselyProbe(pool: Pool): DataLayerProbe {
  const db = new Kysely<Record<string, never>>({ dialect: new PostgresDialect({ pool }) });
  return {
    statement: () => kyselySql`SELECT 1`.execute(db),
    sleep: (seconds) => kyselySql`SELECT 1 FROM pg_sleep(${seconds})`.execute(db),
    transaction: (between) =>
      db.transaction().execute(async (trx) => {
        await kyselySql`INSERT INTO outage_probe VALUES (1)`.execute(trx);
        await between();
        await kyselySql`INSERT INTO outage_probe VALUES (2)`.execute(trx);
      }),
    end: once(() => db.destroy()),
  };
}
