/**
 * Adversary 78 (pool): a data layer's connection setup of several SETs in one text, whose
 * first SET ends with a line comment before its semicolon, loses every SET after it inside an
 * idempotent request: the handler's writes run as the login role, not the role the hook sets
 * (least privilege, row-level security), silently.
 *
 *   onCreateConnection: (c) => c.executeQuery(CompiledQuery.raw(
 *     `SET search_path TO adv78_shop, public -- the tenant's tables first
 *      ; SET ROLE shop_app`)),
 *   // @Idempotent() handler:
 *   await db.insertInto('orders').values({ tag }).returning('made_by').execute();
 *
 * Why: lib/data-layers/connection-setup.ts `setupAsLocal` rewrites each statement of the text
 * (`statement.text`, as the SQL parser cut it: up to its semicolon, the trailing comment
 * included) to `SET LOCAL …` and joins them with `'; '`. The newline that ended the `--`
 * comment is dropped by the cut, so the joined text is `SET LOCAL search_path TO adv78_shop,
 * public -- the tenant's tables first; SET LOCAL ROLE shop_app`: everything after the first
 * `--` is comment. PostgreSQL runs the search path alone; the role is never set, in the
 * request's transaction, for every keyed request. No error is raised.
 *
 * Docs: docs/guides/data-layers.md: "the first statements on a view that set the search path
 * or the role for the session (`SET search_path TO shop, public`, then `SET ROLE shop_app`; one
 * text or one query each, up to its first statement that is no `SET`) are run as `SET LOCAL`,
 * for the request's transaction". Nothing restricts the text's comments.
 *
 * Severity: medium (silent; a role set for least privilege or row-level security is not in
 * force: the handler's statements run with the login's rights, possibly across tenants; the
 * answer is stored and replayed; the comment-before-semicolon layout is uncommon).
 *
 * Failed before the fix: keyed, the commented hook: 201, but the order is made by the login role
 * (`postgres`), not the hook's role. Control: keyed, the same two SETs and comment sent one
 * query each: made by the hook's role. (The same text with the comment after its semicolon is
 * two statements, and meets adversary78-pool-setup-one-text-put-back: 500.)
 *
 * Suggested fix: join the rewritten statements with `;\n` (or rewrite in place, by each
 * statement's location in the original text, keeping everything between them), so a trailing
 * line comment stays ended by its newline.
 *
 * Fixed: `setupAsLocal` (lib/data-layers/connection-setup.ts) joins the rewritten statements
 * with a newline before each semicolon (`'\n; '`), so a line comment that ended a statement ends
 * at its newline; unit case in connection-setup.spec.ts.
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

const ROLE = `adv78_shop_app_${process.pid}`;

let pool: Pool;
let commented: Kysely<DB>;
let plain: Kysely<DB>;

const kysely = (texts: string[]) =>
  new Kysely<DB>({
    dialect: new PostgresDialect({
      pool: () => Promise.resolve(pool),
      onCreateConnection: async (connection) => {
        for (const text of texts) await connection.executeQuery(CompiledQuery.raw(text));
      },
    }),
  });

type Body78 = { tag: string; commented: boolean };

@Controller()
class OrdersController {
  @Post('keyed')
  @Idempotent()
  async keyed(@Body() body: Body78) {
    const db = body.commented ? commented : plain;
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

describe('adversary 78 pool: a setup text whose first SET ends with a line comment', () => {
  let fixture: PoolApp;

  beforeAll(async () => {
    const root = new pg.Client({ connectionString: adminUrl() });
    await root.connect();
    await root.query(`DROP ROLE IF EXISTS ${ROLE}`);
    await root.query(`CREATE ROLE ${ROLE} NOLOGIN`);
    await root.end();
    fixture = await startPoolApp('adv78_setup_comment', {
      module: OrdersModule,
      max: 4,
      usePool: (started) => {
        pool = started;
        commented = kysely([
          `SET search_path TO adv78_shop, public -- the tenant's tables first\n; SET ROLE ${ROLE}`,
        ]);
        plain = kysely([
          "SET search_path TO adv78_shop, public -- the tenant's tables first",
          `SET ROLE ${ROLE}`,
        ]);
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

  const post = (tag: string, isCommented: boolean) =>
    request(fixture.app.getHttpServer())
      .post('/keyed')
      .set('Idempotency-Key', tag)
      .send({ tag, commented: isCommented });

  it('control: keyed, the same SETs and comment one query each: made by the hook role', async () => {
    const answer = await post('keyed-plain', false);
    expect({ status: answer.status, body: answer.body as unknown }).toEqual({
      status: 201,
      body: { tag: 'keyed-plain', madeBy: ROLE },
    });
  }, 30_000);

  it('keyed, the comment before the semicolon: the order is made by the hook role too', async () => {
    const answer = await post('keyed-commented', true);
    expect({ status: answer.status, body: answer.body as unknown }).toEqual({
      status: 201,
      body: { tag: 'keyed-commented', madeBy: ROLE },
    });
  }, 30_000);
});
