/**
 * Adversary 77: a Kysely `onCreateConnection` that sets up each new connection with two
 * statements, the search path and then the role (least privilege), as Kysely's docs show the
 * hook (one `executeQuery` per statement). Keyed, every request fails: only the FIRST
 * statement of a fresh view is taken as the data layer's setup and run as `SET LOCAL`; the
 * second (`SET ROLE …`) is a session setting, refused (`SessionSettingRefusedError`), and the
 * request answers 500 on every try. Without the library: 201.
 *
 *   const db = new Kysely<DB>({ dialect: new PostgresDialect({ pool,
 *     onCreateConnection: async (c) => {
 *       await c.executeQuery(CompiledQuery.raw('SET search_path TO shop, public'));
 *       await c.executeQuery(CompiledQuery.raw('SET ROLE shop_app'));
 *     } }) });
 *
 * Why: `PoolTransaction.onView` (lib/data-layers/pool-transaction.ts) calls `setupAsLocal`
 * (lib/data-layers/connection-setup.ts) only when the view is `fresh` (`!this.viewsUsed.has(view)`),
 * i.e. for its first statement; the view is marked used at once, so the hook's second statement
 * is judged as the handler's own session `SET ROLE` and refused. The same for a hook that sets
 * anything first (checked by hand: `SET TIME ZONE 'UTC'` then `SET search_path TO shop, public`,
 * 500 keyed; either alone, 201).
 *
 * Docs (docs/guides/kysely.md): "Kysely's `onCreateConnection` runs for each client it has not
 * seen, and inside a request each `pool.connect()` is a new view of the request's connection: a
 * hook that sets the search path or the role (`SET search_path TO shop, public`) runs in every
 * request, as the request transaction's `SET LOCAL`". A hook that sets the search path AND the
 * role is such a hook.
 *
 * Control: without `@Idempotent()`: 201, the order written. Keyed, a hook of the search path
 * alone (one statement): 201.
 *
 * Severity: medium (a false 500 on every keyed request of an app whose hook is documented as
 * supported; nothing committed).
 *
 * Fails now: keyed, the two-statement hook: 500, no order (SessionSettingRefusedError "SET ROLE
 * refused: a session-level role … Use SET LOCAL", seen by hand in the handler).
 *
 * Suggested fix: take every leading search-path/role `SET` of a fresh view (until its first
 * other statement) as its setup, not only the first; or recognise the statements sent from
 * within the data layer's setup by the view's state (no statement of its code yet).
 *
 * Fixed: a view stays fresh while its texts are session SETs (`isSessionSetup`,
 * lib/data-layers/connection-setup.ts; `PoolTransaction.onView` marks it used at its first other
 * text), so every leading search-path/role SET of a hook is its setup, run as `SET LOCAL`; a
 * text of several SETs is read statement by statement (`setupAsLocal`, by the library's SQL
 * parser). Unit: lib/data-layers/connection-setup.spec.ts.
 */
import { Body, Controller, Module, Post } from '@nestjs/common';
import { CompiledQuery, Kysely, PostgresDialect } from 'kysely';
import pg, { type Pool } from 'pg';
import request from 'supertest';
import { IdempotencyModule, Idempotent } from '../../../lib/index.js';
import { adminUrl } from '../../support/database.js';
import { type PoolApp, startPoolApp } from '../../support/pool-app.js';

interface DB {
  orders: { id?: number; tag: string };
}

const ROLE = `adv77_shop_app_${process.pid}`;

let pool: Pool;
let twoStatements: Kysely<DB>;
let pathOnly: Kysely<DB>;

const kysely = (statements: string[]) =>
  new Kysely<DB>({
    dialect: new PostgresDialect({
      pool: () => Promise.resolve(pool),
      onCreateConnection: async (connection) => {
        for (const statement of statements) {
          await connection.executeQuery(CompiledQuery.raw(statement));
        }
      },
    }),
  });

type Body77 = { tag: string; pathOnly?: boolean };

async function work({ tag, pathOnly: one }: Body77) {
  const db = one ? pathOnly : twoStatements;
  await db.insertInto('orders').values({ tag }).execute();
  return { tag };
}

@Controller()
class OrdersController {
  @Post('keyed')
  @Idempotent()
  keyed(@Body() body: Body77) {
    return work(body);
  }

  @Post('plain')
  plain(@Body() body: Body77) {
    return work(body);
  }
}

@Module({
  imports: [IdempotencyModule.forRootAsync({ useFactory: () => ({ globalKeys: true, pool }) })],
  controllers: [OrdersController],
})
class OrdersModule {}

describe('adversary 77: a Kysely onCreateConnection of two statements (search path, role)', () => {
  let fixture: PoolApp;

  beforeAll(async () => {
    const root = new pg.Client({ connectionString: adminUrl() });
    await root.connect();
    await root.query(`DROP ROLE IF EXISTS ${ROLE}`);
    await root.query(`CREATE ROLE ${ROLE} NOLOGIN`);
    await root.end();
    fixture = await startPoolApp('adv77_setup_two', {
      module: OrdersModule,
      max: 4,
      usePool: (started) => {
        pool = started;
        twoStatements = kysely(['SET search_path TO adv77_shop, public', `SET ROLE ${ROLE}`]);
        pathOnly = kysely(['SET search_path TO adv77_shop, public']);
      },
      setup: async (admin) => {
        await admin.query(`
          CREATE SCHEMA adv77_shop;
          CREATE TABLE adv77_shop.orders (id serial PRIMARY KEY, tag text NOT NULL);
          GRANT USAGE ON SCHEMA adv77_shop TO ${ROLE};
          GRANT SELECT, INSERT ON adv77_shop.orders TO ${ROLE};
          GRANT USAGE ON SEQUENCE adv77_shop.orders_id_seq TO ${ROLE};`);
      },
    });
  }, 60_000);

  afterAll(async () => {
    await fixture?.close();
    const root = new pg.Client({ connectionString: adminUrl() });
    await root.connect();
    await root.query(`DROP ROLE IF EXISTS ${ROLE}`);
    await root.end();
  });

  const orders = async (tag: string) =>
    Number(
      (
        await fixture.admin.query<{ count: string }>(
          'SELECT count(*) FROM adv77_shop.orders WHERE tag = $1',
          [tag],
        )
      ).rows[0].count,
    );

  const post = (path: string, key: string | undefined, body: Body77) => {
    const call = request(fixture.app.getHttpServer()).post(path);
    if (key) call.set('Idempotency-Key', key);
    return call.send(body);
  };

  const outcome = async (answer: request.Response, tag: string) => ({
    status: answer.status,
    body: answer.body as unknown,
    orders: await orders(tag),
  });

  it('control: keyed, a hook of the search path alone: 201', async () => {
    const tag = 'keyed-path-only';
    expect(await outcome(await post('/keyed', tag, { tag, pathOnly: true }), tag)).toEqual({
      status: 201,
      body: { tag },
      orders: 1,
    });
  }, 30_000);

  it('keyed, the two-statement hook: 201, as without the library', async () => {
    const tag = 'keyed-two';
    expect(await outcome(await post('/keyed', tag, { tag }), tag)).toEqual({
      status: 201,
      body: { tag },
      orders: 1,
    });
  }, 30_000);

  // Last: without the library the hook's SET ROLE stays on the pooled connection (the
  // session's), where the library's own statements would then run as that role.
  it('control: without @Idempotent(), the two-statement hook: 201', async () => {
    const tag = 'plain-two';
    expect(await outcome(await post('/plain', undefined, { tag }), tag)).toEqual({
      status: 201,
      body: { tag },
      orders: 1,
    });
  }, 30_000);
});
