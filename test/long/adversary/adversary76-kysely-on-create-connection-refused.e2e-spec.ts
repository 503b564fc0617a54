/**
 * Adversary 76 (kysely): Kysely's `onCreateConnection` hook, which its `PostgresDialect` runs
 * "once for each created connection" and which Kysely apps use for a connection's session
 * setup (`SET search_path TO shop, public`), runs again at EVERY connection Kysely takes inside
 * an idempotent request, in the request's transaction, where the library refuses its session
 * `SET search_path` with `SessionSettingRefusedError`: every keyed request of the app answers
 * 500, stored and replayed, for code that works without the library.
 *
 *   const db = new Kysely<Db>({
 *     dialect: new PostgresDialect({
 *       pool, // the pool given to IdempotencyModule
 *       onCreateConnection: (conn) =>
 *         conn.executeQuery(CompiledQuery.raw('SET search_path TO shop, public')).then(() => {}),
 *     }),
 *   });
 *   // @Idempotent() handler: await db.insertInto('orders').values({ sku }).execute();
 *
 * Why: Kysely's `PostgresDriver.acquireConnection` calls `onCreateConnection` when the client
 * `pool.connect()` gave is not in its `#connections` WeakMap, i.e. for a client it never saw.
 * Inside a request the pool seam (`PoolTransaction.join.connect`,
 * lib/data-layers/pool-transaction.ts) answers each `pool.connect()` with a NEW `JoinedClient`
 * view, so Kysely sees a new connection every time and runs the hook in the request's
 * transaction; there `PoolTransaction.statement` → `refusalOf`
 * (lib/transaction/request-transaction.ts) → `sessionSettingOf`
 * (lib/transaction/sql/sql-text.ts) refuses the session `SET search_path`. The app cannot
 * follow the refusal's advice (`SET LOCAL`): the hook runs outside any transaction of its own.
 *
 * Docs: docs/guides/kysely.md builds Kysely as `new PostgresDialect({ pool })` on the
 * library's pool and promises its queries join the request; docs/guides/data-layers.md: "Outside
 * an idempotent request the pool is exactly as it was", and `pool.connect()` "gives a view of
 * the request's connection". transactions.md lists `SessionSettingRefusedError` for "the
 * handler sets ... the search path for the session": here the handler does not; a
 * connection-setup hook, run once per connection without the library, does, per query.
 *
 * Severity: medium (a false error answered and stored for every keyed request of such an app,
 * replayed for ever for each key; nothing committed twice).
 *
 * Fails now: the keyed route answers 500 (`{"statusCode":500,"message":"Internal server
 * error"}`; the handler met `SessionSettingRefusedError`), stored (`response_code` 500) and replayed;
 * no order. Controls: the same route without `@Idempotent()` answers 201 with its order; the
 * same keyed route with the search path set by the pool's connection options (`options:
 * '-c search_path=shop,public'`) answers 201.
 *
 * Suggested fix: hand Kysely (any caller of `pool.connect()` inside one request) the SAME view
 * object for the request's connection while it is the request's, or keep a per-request
 * identity per underlying connection, so that a connection-setup hook keyed on the client runs
 * once per real connection as without the library; or let a session `SET` that only restates
 * the connection's current value through.
 *
 * Fixed: a view's first statement that sets the search path or the role for the session (a
 * data layer's setup of a connection new to it) runs as `SET LOCAL` in the request's
 * transaction (lib/data-layers/connection-setup.ts, `PoolTransaction.onView`); the library's
 * own statements put back the path the transaction began with. One view per `pool.connect()`
 * stays: Kysely meets a new view in each request anyway, so a shared one would not spare it.
 */
import { Body, Controller, HttpCode, Module, Post } from '@nestjs/common';
import { CompiledQuery, Kysely, PostgresDialect } from 'kysely';
import { Pool } from 'pg';
import request from 'supertest';
import { IdempotencyModule, Idempotent } from '../../../lib/index.js';
import { type PoolApp, startPoolApp } from '../../support/pool-app.js';

interface Db {
  orders: { id: string; sku: string };
}

let db: Kysely<Db>;
let appPool: Pool;

/** The names of the errors the handler met (none expected). */
const errors: string[] = [];

function placeOrder(sku: string) {
  return db
    .insertInto('orders')
    .values({ sku } as never)
    .execute()
    .then(
      () => ({ sku }),
      (error: Error) => {
        errors.push(error.name);
        throw error;
      },
    );
}

@Controller('orders')
class OrdersController {
  @Post('keyed')
  @HttpCode(201)
  @Idempotent()
  keyed(@Body() body: { sku: string }) {
    return placeOrder(body.sku);
  }

  /** The control: the same code without the library. */
  @Post('plain')
  @HttpCode(201)
  plain(@Body() body: { sku: string }) {
    return placeOrder(body.sku);
  }
}

type Setup = 'hook' | 'pool-options';

async function start(name: string, setup: Setup): Promise<PoolApp> {
  @Module({
    imports: [
      IdempotencyModule.forRootAsync({
        useFactory: () => ({ globalKeys: true, pool: appPool }),
      }),
    ],
    controllers: [OrdersController],
  })
  class OrdersModule {}
  return startPoolApp(name, {
    module: OrdersModule,
    max: 4,
    usePool: (started) => {
      appPool = started;
      if (setup === 'pool-options') {
        // The safe variant: the search path set by the connection's startup options.
        const options = (started as unknown as { options: Record<string, unknown> }).options;
        appPool = new Pool({
          connectionString: options.connectionString as string,
          max: 4,
          options: '-c search_path=shop,public',
        });
        appPool.on('error', () => undefined);
      }
      db = new Kysely<Db>({
        dialect: new PostgresDialect({
          pool: appPool,
          ...(setup === 'hook'
            ? {
                onCreateConnection: async (conn) => {
                  await conn.executeQuery(CompiledQuery.raw('SET search_path TO shop, public'));
                },
              }
            : {}),
        }),
      });
    },
    setup: async (owner) => {
      await owner.query(`CREATE SCHEMA shop`);
      await owner.query(`CREATE TABLE shop.orders (id bigserial PRIMARY KEY, sku text NOT NULL)`);
    },
  });
}

async function post(fixture: PoolApp, route: 'keyed' | 'plain', sku: string) {
  const answer = await request(fixture.app.getHttpServer())
    .post(`/orders/${route}`)
    .set('Idempotency-Key', `key-${sku}`)
    .send({ sku })
    .timeout(20_000);
  return { status: answer.status, body: answer.text };
}

async function outcome(fixture: PoolApp, sku: string) {
  const first = await post(fixture, 'keyed', sku);
  const retried = await post(fixture, 'keyed', sku);
  const { rows } = await fixture.admin.query(`SELECT 1 FROM shop.orders WHERE sku = $1`, [sku]);
  const { rows: stored } = await fixture.admin.query<{ response_code: number }>(
    `SELECT response_code FROM idempotency_keys WHERE key = $1`,
    [`key-${sku}`],
  );
  return {
    first,
    retried,
    orders: rows.length,
    stored: stored.map((row) => row.response_code),
    errors: errors.splice(0),
  };
}

const placed = (sku: string) => ({
  first: { status: 201, body: JSON.stringify({ sku }) },
  retried: { status: 201, body: JSON.stringify({ sku }) },
  orders: 1,
  stored: [201],
  errors: [],
});

describe('adversary 76 kysely: onCreateConnection runs per query inside a request', () => {
  describe('the search path set in onCreateConnection', () => {
    let fixture: PoolApp;
    beforeAll(async () => {
      fixture = await start('adv76_kysely_on_create_hook', 'hook');
    }, 60_000);
    afterAll(async () => {
      await fixture?.close();
    });

    it('control: without the library the order is placed (201)', async () => {
      expect(await post(fixture, 'plain', 'plain-1')).toEqual({
        status: 201,
        body: JSON.stringify({ sku: 'plain-1' }),
      });
      const { rows } = await fixture.admin.query(`SELECT 1 FROM shop.orders WHERE sku = 'plain-1'`);
      expect(rows).toHaveLength(1);
    });

    it('the keyed order is placed once, 201 replayed', async () => {
      expect(await outcome(fixture, 'keyed-1')).toEqual(placed('keyed-1'));
    });
  });

  describe('control: the search path set by the pool connection options', () => {
    let fixture: PoolApp;
    beforeAll(async () => {
      fixture = await start('adv76_kysely_on_create_options', 'pool-options');
    }, 60_000);
    afterAll(async () => {
      await fixture?.close();
      await appPool?.end().catch(() => undefined);
    });

    it('the keyed order is placed once, 201 replayed', async () => {
      expect(await outcome(fixture, 'keyed-2')).toEqual(placed('keyed-2'));
    });
  });
});
