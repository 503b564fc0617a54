/**
 * Adversary 78 (pool): a data layer's connection setup that sets the search path and the role
 * in ONE text (`SET search_path TO shop, public; SET ROLE shop_app`), the form
 * docs/guides/data-layers.md names ("one text or one query each"), is undone right after it
 * inside an idempotent request: the handler's first statement meets neither, and every keyed
 * request answers 500 (`relation "orders" does not exist`, a permanent error) for code that
 * works without the library, and works keyed when the hook sends the two SETs one query each.
 *
 *   onCreateConnection: (c) => c.executeQuery(CompiledQuery.raw(
 *     'SET search_path TO adv78_shop, public; SET ROLE shop_app')),
 *   // @Idempotent() handler:
 *   await db.insertInto('orders').values({ tag }).returning('made_by').execute();
 *
 * Why: `PoolTransaction.onView` (lib/data-layers/pool-transaction.ts) turns the fresh view's
 * setup into `SET LOCAL search_path …; SET LOCAL ROLE …` (`setupAsLocal`,
 * lib/data-layers/connection-setup.ts) and sends it through `statement()` as any text of the
 * view outside a nested transaction. There `oneShotSettingsOf`
 * (lib/data-layers/one-shot-settings.ts) sees a text of several statements that sets the role
 * and search path "for its own implicit transaction" and queues the put-back of both right
 * behind it (`keepOneShot`, `putBack`): the setup the library itself made LOCAL is reverted
 * before the handler's statement. One SET alone is one statement (not put back), and one query
 * per SET too: both work.
 *
 * Docs: docs/guides/data-layers.md: "the first statements on a view that set the search path
 * or the role for the session (`SET search_path TO shop, public`, then `SET ROLE shop_app`; one
 * text or one query each, up to its first statement that is no `SET`) are run as `SET LOCAL`,
 * for the request's transaction". Commit 36c82c3: "every session SET it sends before its first
 * other statement, in one text or one per query".
 *
 * Severity: high (every keyed request of such an app fails with a permanent 500; the same code
 * works without the library and keyed with one query per SET).
 *
 * Failed before the fix: keyed, the one-text hook: 500 (42P01 `relation "orders" does not exist`, seen in
 * the handler). Control: keyed, the same two SETs sent one query each: 201, the order made by
 * the hook's role.
 *
 * Suggested fix: send the setup outside the one-shot rule (it is the request's transaction's
 * own by design): `onView` passes a flag to `statement()` that skips `oneShotSettingsOf`, or
 * sends each rewritten SET LOCAL as a statement alone.
 *
 * Fixed: the view's setup made `SET LOCAL` is sent as the request's transaction's own:
 * `PoolTransaction.onView` marks it (`CallOrder.setup`) and `statement()` skips
 * `oneShotSettingsOf` for it (lib/data-layers/pool-transaction.ts, connection-setup.ts); an
 * app's own several-statement text is still put back.
 */
import { Body, Controller, Module, Post } from '@nestjs/common';
import { CompiledQuery, Kysely, PostgresDialect } from 'kysely';
import pg, { type Pool } from 'pg';
import request from 'supertest';
import { IdempotencyModule, Idempotent } from '../../../lib/index.js';
import { adminUrl } from '../../support/database.js';
import { type PoolApp, startPoolApp } from '../../support/pool-app.js';

interface DB {
  orders: { id?: number; tag: string; made_by?: string };
}

const ROLE = `adv78_put_back_${process.pid}`;

let pool: Pool;
let oneText: Kysely<DB>;
let oneQueryEach: Kysely<DB>;

const kysely = (texts: string[]) =>
  new Kysely<DB>({
    dialect: new PostgresDialect({
      pool: () => Promise.resolve(pool),
      onCreateConnection: async (connection) => {
        for (const text of texts) await connection.executeQuery(CompiledQuery.raw(text));
      },
    }),
  });

type Body78 = { tag: string; oneText: boolean };

@Controller()
class OrdersController {
  @Post('keyed')
  @Idempotent()
  async keyed(@Body() body: Body78) {
    const db = body.oneText ? oneText : oneQueryEach;
    const [row] = await db
      .insertInto('orders')
      .values({ tag: body.tag })
      .returning('made_by')
      .execute();
    return { tag: body.tag, madeBy: row.made_by };
  }
}

@Module({
  imports: [IdempotencyModule.forRootAsync({ useFactory: () => ({ globalKeys: true, pool }) })],
  controllers: [OrdersController],
})
class OrdersModule {}

describe('adversary 78 pool: a setup of the search path and the role in one text', () => {
  let fixture: PoolApp;

  beforeAll(async () => {
    const root = new pg.Client({ connectionString: adminUrl() });
    await root.connect();
    await root.query(`DROP ROLE IF EXISTS ${ROLE}`);
    await root.query(`CREATE ROLE ${ROLE} NOLOGIN`);
    await root.end();
    fixture = await startPoolApp('adv78_setup_one_text', {
      module: OrdersModule,
      max: 4,
      usePool: (started) => {
        pool = started;
        oneText = kysely([`SET search_path TO adv78_shop, public; SET ROLE ${ROLE}`]);
        oneQueryEach = kysely(['SET search_path TO adv78_shop, public', `SET ROLE ${ROLE}`]);
      },
      setup: async (admin) => {
        await admin.query(`
          CREATE SCHEMA adv78_shop;
          CREATE TABLE adv78_shop.orders (
            id serial PRIMARY KEY, tag text NOT NULL, made_by text NOT NULL DEFAULT current_user);
          GRANT USAGE ON SCHEMA adv78_shop TO ${ROLE};
          GRANT SELECT, INSERT ON adv78_shop.orders TO ${ROLE};
          GRANT USAGE ON SEQUENCE adv78_shop.orders_id_seq TO ${ROLE};`);
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

  const post = (tag: string, isOneText: boolean) =>
    request(fixture.app.getHttpServer())
      .post('/keyed')
      .set('Idempotency-Key', tag)
      .send({ tag, oneText: isOneText });

  it('control: keyed, the two SETs one query each: 201, made by the hook role', async () => {
    const answer = await post('keyed-each', false);
    expect({ status: answer.status, body: answer.body as unknown }).toEqual({
      status: 201,
      body: { tag: 'keyed-each', madeBy: ROLE },
    });
  }, 30_000);

  it('keyed, the two SETs in one text: 201, made by the hook role', async () => {
    const answer = await post('keyed-one-text', true);
    expect({ status: answer.status, body: answer.body as unknown }).toEqual({
      status: 201,
      body: { tag: 'keyed-one-text', madeBy: ROLE },
    });
  }, 30_000);
});
