import { Body, Controller, type INestApplication, Module, Post } from '@nestjs/common';
import { type Client, type Pool } from 'pg';
import request from 'supertest';
import { IdempotencyModule, Idempotent } from '../../../lib/index.js';
import { type PoolApp, startPoolApp } from '../../support/pool-app.js';

/**
 * Adversary, round 8: data-layers.md: "`pool.connect()` gives a view of the request's
 * connection", on which pg code runs as it did. The view (`JoinedClient`) has `query` and
 * `release` only: node-postgres' `client.escapeIdentifier()` and `client.escapeLiteral()`
 * (its documented way to build a dynamic name into SQL) are not there.
 *
 * What a user does: takes a client with `pool.connect()` and writes into a table named per
 * tenant, quoting the name with `client.escapeIdentifier(table)`.
 * What happens: TypeError "client.escapeIdentifier is not a function": a 500, stored and
 * replayed for the key; nothing written.
 * What should happen: 201 and the row, as without the library (the control route).
 */
let pool: Pool;

async function write(slot: string) {
  const client = await pool.connect();
  try {
    const table = client.escapeIdentifier('tenant slots');
    await client.query(`INSERT INTO ${table} (slot) VALUES ($1)`, [slot]);
  } finally {
    client.release();
  }
  return { slot };
}

@Controller()
class SlotsController {
  @Post('slots')
  @Idempotent()
  idempotent(@Body() body: { slot: string }) {
    return write(body.slot);
  }

  @Post('plain/slots')
  plain(@Body() body: { slot: string }) {
    return write(body.slot);
  }
}

@Module({
  imports: [IdempotencyModule.forRootAsync({ useFactory: () => ({ globalKeys: true, pool }) })],
  controllers: [SlotsController],
})
class SlotsModule {}

describe('adversary 8: a client of the pool in a request has no escapeIdentifier', () => {
  let fixture: PoolApp;
  let admin: Client;
  let app: INestApplication;

  beforeAll(async () => {
    fixture = await startPoolApp('adv8_joined_client_escape', {
      module: SlotsModule,
      max: 2,
      usePool: (started) => (pool = started),
      setup: async (owner) => {
        await owner.query(
          'CREATE TABLE "tenant slots" (id serial PRIMARY KEY, slot text NOT NULL)',
        );
      },
    });
    ({ admin, app } = fixture);
  });

  afterAll(() => fixture?.close());

  const kept = async (slot: string) =>
    (await admin.query('SELECT 1 FROM "tenant slots" WHERE slot = $1', [slot])).rows.length;

  it('without the library: 201, one row (the control)', async () => {
    const answer = await request(app.getHttpServer()).post('/plain/slots').send({ slot: 'p' });
    expect({ status: answer.status, kept: await kept('p') }).toEqual({ status: 201, kept: 1 });
  });

  it('with it: 201, one row', async () => {
    const answer = await request(app.getHttpServer())
      .post('/slots')
      .set('Idempotency-Key', 'k')
      .send({ slot: 'k' });
    // Observed: 500 (TypeError: client.escapeIdentifier is not a function), nothing kept.
    expect({ status: answer.status, kept: await kept('k') }).toEqual({ status: 201, kept: 1 });
  });
});
