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
 * Adversary, round 6: transactions.md's table promises, for "the same mode set where no text
 * shows it (inside a function of the app's)": "500 `database_permanent` … meets the same
 * answer, never a 503". adversary2-read-only-transaction checks it for a handler that writes
 * *before* the function and answers: the stored answer's UPDATE meets the 25006, and the
 * library asks the session whether it was the handler's doing. A handler that writes *after*
 * the function (a report function that guards itself with `set_config('transaction_read_only',
 * 'on', true)`: harmless in autocommit, where it ends with its statement) meets the 25006 on
 * its own write, which nobody marks as the handler's (`markReadOnlyByHandler` is only for a
 * nested transaction begun READ ONLY): `isConnectionError` reads 25006 as "a primary that was
 * demoted", 503 `store_unavailable` with `Retry-After`, nothing stored, and every retry meets
 * the same 503, for ever (a client that retries keeps hammering, a consumer redelivers). Without
 * the library: 201.
 */
let pool: Pool;

async function reportThenWrite(
  query: (text: string, values?: unknown[]) => Promise<unknown>,
  slot: string,
) {
  await query('SELECT guarded_report()');
  await query('INSERT INTO slots (slot) VALUES ($1)', [slot]);
  return { slot };
}

@Controller()
class PoolController {
  @Post('report')
  @Idempotent()
  idempotent(@Body() body: { slot: string }) {
    return reportThenWrite((text, values) => pool.query(text, values), body.slot);
  }

  @Post('plain/report')
  plain(@Body() body: { slot: string }) {
    return reportThenWrite((text, values) => pool.query(text, values), body.slot);
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

  @Post('report')
  @Idempotent()
  idempotent(@Body() body: { slot: string }) {
    return reportThenWrite((text, values) => this.dataSource.query(text, values), body.slot);
  }

  @Post('plain/report')
  plain(@Body() body: { slot: string }) {
    return reportThenWrite((text, values) => this.dataSource.query(text, values), body.slot);
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

describe('adversary 6: a function makes the transaction read only, then the handler writes', () => {
  let database: TestDatabase;
  let admin: Client;
  let app: INestApplication;
  let ormApp: INestApplication;

  beforeAll(async () => {
    database = await createTestDatabase('adv6_read_only_then_write');
    admin = new Client({ connectionString: database.url });
    await admin.connect();
    await admin.query(readFileSync('migrations/schema.sql', 'utf8'));
    await admin.query('CREATE TABLE slots (id serial PRIMARY KEY, slot text NOT NULL)');
    // A report that guards itself against writing: harmless in autocommit.
    await admin.query(`CREATE FUNCTION guarded_report() RETURNS bigint LANGUAGE plpgsql AS $$
      BEGIN
        PERFORM set_config('transaction_read_only', 'on', true);
        RETURN (SELECT count(*) FROM slots);
      END $$`);
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
    await database?.drop();
  });

  const kept = async (slot: string) =>
    (await admin.query('SELECT 1 FROM slots WHERE slot = $1', [slot])).rows.length;

  it.each(['pool', 'typeorm'])('%s, without the library: 201 (the control)', async (seam) => {
    const slot = `${seam}-plain`;
    const response = await request((seam === 'pool' ? app : ormApp).getHttpServer())
      .post('/plain/report')
      .send({ slot });
    expect({ status: response.status, kept: await kept(slot) }).toEqual({ status: 201, kept: 1 });
  });

  it.each(['pool', 'typeorm'])(
    '%s, with it: as without, or a final answer; never a 503 on every try',
    async (seam) => {
      const slot = `${seam}-idempotent`;
      const send = () =>
        request((seam === 'pool' ? app : ormApp).getHttpServer())
          .post('/report')
          .set('Idempotency-Key', slot)
          .send({ slot });
      const statuses = [];
      for (let i = 0; i < 3; i++) statuses.push((await send()).status);
      // Observed: [503, 503, 503] (store_unavailable, Retry-After), nothing ever stored.
      expect(statuses.filter((status) => status === 503)).toEqual([]);
    },
    30_000,
  );
});
