import { readFileSync } from 'node:fs';
import { Body, Controller, type INestApplication, Module, Post } from '@nestjs/common';
import { InjectDataSource, TypeOrmModule } from '@nestjs/typeorm';
import { Client, type Pool } from 'pg';
import { DataSource } from 'typeorm';
import request from 'supertest';
import { IdempotencyModule, Idempotent } from '../../../lib/index.js';
import { bootstrapTestApp } from '../../support/bootstrap.js';
import { createTestDatabase, type TestDatabase } from '../../support/database.js';
import { createTestPool, endTestPool } from '../../support/test-pool.js';

/**
 * Adversary, round 7: c2efa46 marks every 25006 met in a request's transaction that *began*
 * read-write as the handler's own doing (`noteFailure` + `beganReadOnly === false`), so the
 * handler's throw is its answer, stored and replayed. But a 25006 in a read-write local
 * transaction is not always the handler's doing: dblink and postgres_fdw re-raise the remote
 * server's SQLSTATE, so a write to a remote database that is read only for a while (a standby
 * during a failover, a node fenced with default_transaction_read_only by pg_auto_failover)
 * arrives as 25006 in a local transaction that began read-write. Before c2efa46 that was a 503
 * (`UNAVAILABLE_STATES`: an outage), and the retry ran the work once the remote was writable.
 * Now the first try's 500 is stored, and every retry replays it, for ever, though the remote
 * became writable. Without the library: 500, then the retry's 201.
 *
 * The remote's read-only spell is simulated with `ALTER DATABASE remote SET
 * default_transaction_read_only = on` (as writable-host.e2e-spec does for a standby), lifted
 * between the first try and the retry; dblink opens a new session each call, so it sees both.
 */
let pool: Pool;
let remoteUrl: string;

async function orderThenShip(
  query: (text: string, values?: unknown[]) => Promise<unknown>,
  order: string,
) {
  await query('INSERT INTO orders (ref) VALUES ($1)', [order]);
  await query('SELECT dblink_exec($1, $2)', [
    remoteUrl,
    `INSERT INTO shipments (ref) VALUES ('${order}')`,
  ]);
  return { order };
}

@Controller()
class PoolController {
  @Post('ship')
  @Idempotent()
  idempotent(@Body() body: { order: string }) {
    return orderThenShip((text, values) => pool.query(text, values), body.order);
  }

  @Post('plain/ship')
  plain(@Body() body: { order: string }) {
    return orderThenShip((text, values) => pool.query(text, values), body.order);
  }
}

@Module({
  imports: [IdempotencyModule.forRootAsync({ useFactory: () => ({ globalKeys: true, pool }) })],
  controllers: [PoolController],
})
class PoolModule {}

@Controller()
class OrmController {
  constructor(@InjectDataSource() private readonly dataSource: DataSource) {}

  @Post('ship')
  @Idempotent()
  idempotent(@Body() body: { order: string }) {
    return orderThenShip((text, values) => this.dataSource.query(text, values), body.order);
  }

  @Post('plain/ship')
  plain(@Body() body: { order: string }) {
    return orderThenShip((text, values) => this.dataSource.query(text, values), body.order);
  }
}

function ormModule(url: string) {
  @Module({
    imports: [
      TypeOrmModule.forRoot({ type: 'postgres', url, extra: { max: 2 } }),
      IdempotencyModule.forRoot({ globalKeys: true }),
    ],
    controllers: [OrmController],
  })
  class OrmModule {}
  return OrmModule;
}

describe('adversary 7: a remote (dblink) read only for a while, in a read-write transaction', () => {
  let database: TestDatabase;
  let remote: TestDatabase;
  let admin: Client;
  let remoteAdmin: Client;
  let app: INestApplication;
  let ormApp: INestApplication;

  beforeAll(async () => {
    database = await createTestDatabase('adv7_remote_read_only');
    remote = await createTestDatabase('adv7_remote_side');
    remoteUrl = remote.url;
    admin = new Client({ connectionString: database.url });
    await admin.connect();
    await admin.query(readFileSync('migrations/schema.sql', 'utf8'));
    await admin.query('CREATE EXTENSION dblink');
    await admin.query('CREATE TABLE orders (id serial PRIMARY KEY, ref text NOT NULL)');
    remoteAdmin = new Client({ connectionString: remote.url });
    await remoteAdmin.connect();
    await remoteAdmin.query('CREATE TABLE shipments (id serial PRIMARY KEY, ref text NOT NULL)');
    pool = createTestPool({ connectionString: database.url, max: 2 });
    pool.on('error', () => undefined);
    app = await bootstrapTestApp(PoolModule, 'express');
    ormApp = await bootstrapTestApp(ormModule(database.url), 'express');
  });

  afterAll(async () => {
    await app?.close();
    await ormApp?.close();
    await endTestPool(pool);
    await admin?.end();
    await remoteAdmin?.end();
    await database?.drop();
    await remote?.drop();
  });

  const fence = (on: boolean) =>
    remoteAdmin.query(
      on
        ? `ALTER DATABASE ${remote.name} SET default_transaction_read_only = on`
        : `ALTER DATABASE ${remote.name} RESET default_transaction_read_only`,
    );

  const kept = async (order: string) => ({
    orders: (await admin.query('SELECT 1 FROM orders WHERE ref = $1', [order])).rows.length,
    shipments: (await remoteAdmin.query('SELECT 1 FROM shipments WHERE ref = $1', [order])).rows
      .length,
  });

  const appOf = (seam: string) => (seam === 'pool' ? app : ormApp);

  it.each(['pool', 'typeorm'])(
    '%s, without the library: 500 while fenced, the retry 201 (the control)',
    async (seam) => {
      const order = `${seam}-plain`;
      const send = () => request(appOf(seam).getHttpServer()).post('/plain/ship').send({ order });
      await fence(true);
      const first = (await send()).status;
      await fence(false);
      const retry = (await send()).status;
      expect({ first, retry, ...(await kept(order)) }).toEqual({
        first: 500,
        retry: 201,
        orders: 2, // the first try's INSERT committed on its own (autocommit), as plain code does
        shipments: 1,
      });
    },
  );

  it.each(['pool', 'typeorm'])(
    '%s, with it: the retry once the remote is writable runs the work (201), not a stored 500',
    async (seam) => {
      const order = `${seam}-idempotent`;
      const send = () =>
        request(appOf(seam).getHttpServer())
          .post('/ship')
          .set('Idempotency-Key', order)
          .send({ order });
      await fence(true);
      const first = (await send()).status;
      await fence(false);
      const retry = await send();
      // Observed: first 500 (the 25006 marked the handler's own, its answer stored), retry 500
      // replayed (idempotent-replayed), nothing shipped. Before c2efa46: 503, then 201.
      expect({ retry: retry.status, ...(await kept(order)) }).toEqual({
        retry: 201,
        orders: 1,
        shipments: 1,
      });
      expect(first).not.toBe(201);
    },
    30_000,
  );
});
