/**
 * Fixed (session of 2026-12-07): every statement of the library's own carries node-postgres' per-
 * query `types` of its own (lib/connection/library-types.ts: fixed parsers for json, jsonb, bytea,
 * bool, ints, floats, timestamps and arrays, the text for every other type), put on at the choke
 * points (lib/connection/deadline.ts `queryWithDeadline`, lib/connection/session-state.ts
 * `runSurrounded`, so `libraryStatement`, the claims, takeovers, fenced commits and the schema
 * check; the BEGIN and level reads of lib/transaction/request-transaction.ts, the partitioned
 * store's maintenance, the CLI's client, the jobs' schema read): neither a pool's `types` nor
 * `pg.types.setTypeParser` reaches what the library reads; the app's own statements keep the app's
 * parsers.
 *
 * Adversary 105 (pool): a pool whose json type parser keeps json as text (`types` on the Pool's
 * config, or `pg.types.setTypeParser(114, …)`) cannot start the app: the library's schema check
 * reads its catalog rows (json) through the app's parser and dies on `found.columns.map is not a
 * function`, a TypeError that names nothing of the cause.
 *
 * User code:
 *   const pool = new Pool({ ..., types: { getTypeParser: (oid, format) =>
 *     oid === 114 ? (text) => text : pg.types.getTypeParser(oid, format) } });
 *   IdempotencyModule.forRootAsync({ useFactory: () => ({ globalKeys: true, pool }) })
 *
 * Code path: lib/idempotency-schema.check.ts `onApplicationBootstrap` -> lib/data-layers/
 * idempotency-database.ts `schemaCheck` (its catalog query, run on a client of the app's pool,
 * whose json column is parsed by the pool's `types`) -> lib/schema/schema-check.ts
 * `missingSchema` (`found.columns.map` on a string). The library's statements carry no `types`
 * of their own.
 *
 * Docs quote: data-layers.md: "Outside an idempotent request the pool is exactly as it was";
 * the module takes "the app's `pg.Pool`" with no word on its type parsers. A schema that is
 * missing is said plainly at boot (the migration to run); here the schema is there.
 *
 * Severity: medium (a false refusal: an app whose pool works without the library does not
 * start, and the error says nothing of why). The same parser on jsonb (3802) boots but makes
 * a retry run completed phases again (adversary105-pool-jsonb-parser-reruns-phases).
 *
 * Fails now: startup rejects with `TypeError: found.columns.map is not a function`.
 *
 * Controls: the same app on a pool without the override starts and answers, and replays.
 *
 * Suggested fix: give the library's own statements node-postgres' default parsers (`types` on
 * each query config) or cast what it reads to text and parse it itself; at least, check the
 * shape of what the catalog query returned and say that a type parser of the pool changed it.
 */
import { Body, Controller, HttpCode, Module, Post, type Type } from '@nestjs/common';
import pg, { type Pool } from 'pg';
import request from 'supertest';
import { IdempotencyModule, Idempotent } from '../../../lib/index.js';
import { type PoolApp, startPoolApp } from '../../support/pool-app.js';

function moduleOf(stack: { pool?: Pool }): Type {
  @Controller('orders')
  class OrdersController {
    @Post()
    @HttpCode(201)
    @Idempotent()
    async create(@Body() { sku }: { sku: string }) {
      await stack.pool!.query(`INSERT INTO orders (sku) VALUES ($1)`, [sku]);
      return { sku };
    }
  }

  @Module({
    imports: [
      IdempotencyModule.forRootAsync({
        useFactory: () => ({ globalKeys: true, pool: stack.pool! }),
      }),
    ],
    controllers: [OrdersController],
  })
  class OrdersModule {}
  return OrdersModule;
}

/** The app's override: json as the text PostgreSQL sent. */
const jsonAsText = {
  getTypeParser: (oid: number, format?: string) =>
    oid === 114
      ? (text: string) => text
      : (pg.types.getTypeParser as (o: number, f?: string) => unknown)(oid, format),
};

const setup = async (owner: pg.Client) => {
  await owner.query(`CREATE TABLE orders (id bigserial PRIMARY KEY, sku text NOT NULL)`);
};

async function startAndPost(name: string, types: unknown) {
  const stack: { pool?: Pool } = {};
  let fixture: PoolApp | undefined;
  try {
    fixture = await startPoolApp(name, {
      module: moduleOf(stack),
      max: 4,
      usePool: (started) => {
        // As `new Pool({ ..., types })`: read by each client the pool makes.
        if (types) (started.options as { types?: unknown }).types = types;
        stack.pool = started;
      },
      setup,
    });
    const post = async () =>
      (
        await request(fixture!.app.getHttpServer())
          .post('/orders')
          .set('Idempotency-Key', 'key-1')
          .send({ sku: 'a' })
          .timeout(20_000)
      ).status;
    const first = await post();
    const replayed = await post();
    return { started: true, first, replayed };
  } catch (error) {
    return { started: false, error: String(error) };
  } finally {
    await fixture?.close();
  }
}

describe('adversary 105 pool: a json type parser on the pool stops the app from starting', () => {
  it('control: without the override the app starts, answers and replays', async () => {
    expect(await startAndPost('adv105_pool_json_plain', undefined)).toEqual({
      started: true,
      first: 201,
      replayed: 201,
    });
  }, 60_000);

  it('a json parser on the pool does not stop the app from starting', async () => {
    expect(await startAndPost('adv105_pool_json_raw', jsonAsText)).toEqual({
      started: true,
      first: 201,
      replayed: 201,
    });
  }, 60_000);
});
