/**
 * Adversary 78 (pool): the app's own cancel of the request's statement (Kysely's
 * `'cancel query'` abort) is answered 503 `database_transient` ("retry later", and every retry
 * meets it again) instead of the documented 500 `transaction_aborted`, whenever the request
 * runs on a connection the pool opened before the library joined it: a pool whose provider
 * checks the database before handing the pool over, the usual readiness check.
 *
 *   IdempotencyModule.forRootAsync({
 *     useFactory: async () => {
 *       await pool.query('SELECT 1'); // fail fast at start-up if the database is not there
 *       return { globalKeys: true, pool };
 *     },
 *   })
 *   ...
 *   await sql`SELECT 1 FROM pg_sleep(3)`.execute(db, {
 *     signal: AbortSignal.timeout(300), inflightQueryAbortStrategy: 'cancel query' });
 *
 * Why: lib/data-layers/cancel-watch.ts `watchCancels` replaces `pool.Client` with a watching
 * subclass when the module joins the pool (lib/data-layers/pool-join.ts, from
 * `poolDataLayer`). The control client Kysely makes with `new pool.Client()` is watched, so the
 * cancel is noted on the request's connection (`RequestTransaction.cancelAsked`). But the error
 * it causes is only marked the app's own by `noteAnswer`, which runs in the watching subclass's
 * `query`: the connections pg-pool opened before the join are instances of plain `pg.Client`
 * and keep their own `query`; pg-pool keeps them idle and hands them out again (each release
 * restarts their idle timer, so under load they live for ever). Their 57014 is never marked,
 * `isCancelAskedForError` is false, and lib/transaction/failure.ts answers it as a passing
 * 57014 (503).
 *
 * Docs: docs/guides/kysely.md: "a query aborted with `inflightQueryAbortStrategy: 'cancel
 * query'` or `'kill session'` (its `signal` fired) | 500 `transaction_aborted`, no
 * `Retry-After`"; docs/guides/data-layers.md: "A statement cancelled ... by the request's own
 * code ... is no passing failure: it ends the request's transaction, which answers 500
 * `transaction_aborted`". Nothing says the pool must be unused before the module gets it.
 *
 * Severity: medium (a "retry later" for ever to a client for a permanent failure, on some
 * connections and not others: the same request answers 503 or 500 by which connection it got;
 * nothing is committed twice).
 *
 * Failed before the fix: on the pool warmed before the module started, the keyed route answers 503
 * `database_transient` (and its retry again), not 500 `transaction_aborted`. Control: the same
 * code on a pool the module joined before any connection opened answers 500
 * `transaction_aborted`, as documented.
 *
 * Suggested fix: mark the answer where the request's connection is known, not on the client's
 * class: wrap `query` on the client instance when the request's transaction takes its
 * connection (or on pool 'connect'/'acquire' for each client), or patch the prototype of the
 * pool's existing idle clients at join time as well as `pool.Client`.
 *
 * Fixed: `watchCancels` (lib/data-layers/cancel-watch.ts) also watches each client the pool
 * hands out (pg-pool's 'acquire'): a client opened before the join, of the plain class, gets its
 * own `query` watched (`watchClient`), so its 57014 is marked the app's own.
 */
import { Body, Controller, HttpCode, Module, Post } from '@nestjs/common';
import { Kysely, PostgresDialect, sql } from 'kysely';
import { type Pool } from 'pg';
import request from 'supertest';
import { IdempotencyModule, Idempotent } from '../../../lib/index.js';
import { type PoolApp, startPoolApp } from '../../support/pool-app.js';

interface Db {
  orders: { id: string; sku: string };
}

function appOn(name: string, warm: boolean) {
  let pool: Pool;
  let db: Kysely<Db>;

  @Controller('orders')
  class OrdersController {
    @Post()
    @HttpCode(201)
    @Idempotent()
    async place(@Body() body: { sku: string }) {
      await db
        .insertInto('orders')
        .values({ sku: body.sku } as never)
        .execute();
      let extras: unknown = null;
      try {
        extras = (
          await sql`SELECT 1 AS n FROM pg_sleep(3)`.execute(db, {
            signal: AbortSignal.timeout(300),
            inflightQueryAbortStrategy: 'cancel query',
          })
        ).rows;
      } catch {
        extras = null;
      }
      return { sku: body.sku, extras };
    }
  }

  @Module({
    imports: [
      IdempotencyModule.forRootAsync({
        useFactory: async () => {
          // The readiness check: every connection of the pool opened (and kept idle) here.
          if (warm) await Promise.all([1, 2, 3, 4].map(() => pool.query('SELECT pg_sleep(0.1)')));
          return { globalKeys: true, pool };
        },
      }),
    ],
    controllers: [OrdersController],
  })
  class OrdersModule {}

  return startPoolApp(name, {
    module: OrdersModule,
    max: 4,
    usePool: (started) => {
      pool = started;
      db = new Kysely<Db>({ dialect: new PostgresDialect({ pool: started }) });
    },
    setup: async (owner) => {
      await owner.query(`CREATE TABLE orders (id bigserial PRIMARY KEY, sku text NOT NULL)`);
    },
  });
}

async function post(fixture: PoolApp, sku: string) {
  const answer = await request(fixture.app.getHttpServer())
    .post('/orders')
    .set('Idempotency-Key', `key-${sku}`)
    .send({ sku })
    .timeout(30_000);
  return { status: answer.status, code: (answer.body as { code?: string }).code };
}

describe('adversary 78 pool: a cancel on a connection opened before the join', () => {
  let warm: PoolApp | undefined;
  let cold: PoolApp | undefined;

  afterAll(async () => {
    await warm?.close();
    await cold?.close();
  });

  it('control: on a pool joined before it opened anything, 500 transaction_aborted', async () => {
    cold = await appOn('adv78_pool_cancel_cold', false);
    const first = await post(cold, 'cold');
    const retried = await post(cold, 'cold');
    expect({ first, retried }).toEqual({
      first: { status: 500, code: 'transaction_aborted' },
      retried: { status: 500, code: 'transaction_aborted' },
    });
  }, 60_000);

  it('on a pool warmed by a readiness check, the same cancel is 500 transaction_aborted', async () => {
    warm = await appOn('adv78_pool_cancel_warm', true);
    const first = await post(warm, 'warm');
    const retried = await post(warm, 'warm');
    expect({ first, retried }).toEqual({
      first: { status: 500, code: 'transaction_aborted' },
      retried: { status: 500, code: 'transaction_aborted' },
    });
  }, 60_000);
});
