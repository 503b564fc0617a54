import { Controller, type INestApplication, Module, Post } from '@nestjs/common';
import { Client, type Pool } from 'pg';
import request from 'supertest';
import { DataSource } from 'typeorm';
import {
  IDEMPOTENCY_MIGRATIONS,
  IdempotencyModule,
  Idempotent,
  PartitionIdempotencyKeys1764461600000,
} from '../../../lib/index.js';
import { bootstrapTestApp } from '../../support/bootstrap.js';
import { createTestDatabase, type TestDatabase } from '../../support/database.js';
import { TcpProxy } from '../../support/tcp-proxy.js';
import { createTestPool, endTestPool } from '../../support/test-pool.js';

/**
 * Adversary 39c: the database is down while the app starts (a rollout where the app's pod is
 * up before PostgreSQL; the library allows it: lib/idempotency-schema.check.ts:21-27, "the
 * check runs again before the library's first statement"). Its default isolation is
 * SERIALIZABLE (`ALTER DATABASE app SET default_transaction_isolation = 'serializable'`,
 * docs/guides/transactions.md:444-451, supported), keys are partitioned (`partitionedExpiry`),
 * and the route is `@Idempotent({ oneCommit: true })` on the pool seam. Every request of the
 * first burst once the database is up is answered 500 `database_permanent`, "Retrying will not
 * help until the database is fixed": false, the same keys retried a moment later get 201.
 *
 * What happens: the first requests' transaction is made (lib/idempotency.interceptor.ts:176,
 * `this.database.transaction(false)`) before anything has learnt the server's level: the copy
 * `transaction.serverLevel = this.serverLevel` (lib/transaction/idempotency-database.ts:241)
 * is undefined. `claimIn` then awaits `database.ready()` (lib/claim/postgres-claim.store.ts:136),
 * which learns SERIALIZABLE for the database, but asks the transaction made before it
 * (`plannedAboveReadCommitted`, :140; lib/transaction/request-transaction.ts:415), which still
 * plans no level: the claim is made in the request's transaction, whose `BEGIN` names no level
 * (request-transaction.ts:976-978) and so runs SERIALIZABLE, a level the library did not plan
 * (transactions.md:449-451 promises "its transactions never begin at a level it did not plan
 * for"). The partitioned claim function refuses that (55000 "idempotency_claim needs READ
 * COMMITTED"), and the library calls it lasting: 500 with no Retry-After. A client that trusts
 * the problem type gives up on a payment that was never made.
 *
 * Expected: as when the database is up at start-up (the control, same app and database): the
 * claim is made apart above READ COMMITTED and every first request is 201; at worst a 503 that
 * says retry, never a lasting 500 with a false remedy.
 *
 * Severity: medium (a wrong, retryable answer that tells the client not to retry; every request
 * of the first burst after an outage at start-up, nothing stored, the retry passes).
 */

let pool: Pool;

@Controller()
class OrdersController {
  @Post('orders')
  @Idempotent({ oneCommit: true })
  async create() {
    await pool.query('INSERT INTO orders (ref) VALUES ($1)', ['x']);
    return { ok: true };
  }
}

interface Started {
  database: TestDatabase;
  admin: Client;
  app: INestApplication;
  close(): Promise<void>;
}

async function start(downAtBoot: boolean): Promise<Started> {
  const database = await createTestDatabase(`adv39c_onecommit_${downAtBoot ? 'down' : 'up'}`);
  const migrations = new DataSource({
    type: 'postgres',
    url: database.url,
    migrations: [...IDEMPOTENCY_MIGRATIONS, PartitionIdempotencyKeys1764461600000],
  });
  await migrations.initialize();
  await migrations.runMigrations();
  await migrations.destroy();
  const admin = new Client({ connectionString: database.url });
  await admin.connect();
  await admin.query('CREATE TABLE orders (id serial PRIMARY KEY, ref text NOT NULL)');
  await admin.query(
    `ALTER DATABASE ${database.name} SET default_transaction_isolation = 'serializable'`,
  );
  const direct = new URL(database.url);
  const proxy = new TcpProxy('127.0.0.1', Number(direct.port || 5432));
  await proxy.start();
  const url = new URL(database.url);
  url.hostname = '127.0.0.1';
  url.port = String(proxy.port);
  const ownPool = createTestPool({ connectionString: url.toString(), max: 6 });
  ownPool.on('error', () => undefined);
  pool = ownPool;
  @Module({
    imports: [
      IdempotencyModule.forRootAsync({
        useFactory: () => ({ globalKeys: true, pool: ownPool, partitionedExpiry: true }),
      }),
    ],
    controllers: [OrdersController],
  })
  class OrdersModule {}
  if (downAtBoot) await proxy.refuse();
  const app = await bootstrapTestApp(OrdersModule, 'express');
  if (downAtBoot) await proxy.restore();
  return {
    database,
    admin,
    app,
    close: async () => {
      await app.close();
      await endTestPool(ownPool);
      await admin.end();
      await proxy.stop();
      await database.drop();
    },
  };
}

async function burst(started: Started, keys: string[]) {
  const server = started.app.getHttpServer();
  const answers = await Promise.all(
    keys.map((key) => request(server).post('/orders').set('Idempotency-Key', key)),
  );
  return answers.map((answer) => `${answer.status} ${answer.body?.code ?? ''}`.trim());
}
const keysOf = (tag: string) => Array.from({ length: 6 }, (_, i) => `${tag}-${i}`);

describe('SERIALIZABLE by default, partitioned keys, oneCommit route', () => {
  it('control: the database up when the app starts: every first request 201', async () => {
    const started = await start(false);
    try {
      const statuses = await burst(started, keysOf('first'));
      expect(statuses.filter((s) => s.startsWith('5'))).toEqual([]);
    } finally {
      await started.close();
    }
  });

  // Fails today: ['500 database_permanent' x 6], then the same keys retried: 201 each.
  it('the database down at start, up before the first requests: every first request 201', async () => {
    const started = await start(true);
    try {
      const statuses = await burst(started, keysOf('first'));
      expect(statuses.filter((s) => s.startsWith('5'))).toEqual([]);
    } finally {
      await started.close();
    }
  });
});
