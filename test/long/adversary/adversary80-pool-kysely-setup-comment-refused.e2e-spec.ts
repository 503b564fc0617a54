/**
 * Adversary 80 (pool): a Kysely `onCreateConnection` hook whose search-path SET begins with a
 * comment (`-- the tenant schema first\nSET search_path TO shop, public`, or `/* tenant *\/ SET
 * …`) is refused in every keyed request: 500, the error stored and replayed for the retention
 * window, while the same hook without the comment runs as the request's `SET LOCAL` (201), and
 * outside a request the commented hook works as PostgreSQL reads it.
 *
 *   new Kysely<Db>({ dialect: new PostgresDialect({ pool, onCreateConnection: async (c) => {
 *     await c.executeQuery(CompiledQuery.raw('-- the tenant schema first\nSET search_path TO shop, public'));
 *   } }) });
 *   // the handler, with @Idempotent(): await db.insertInto('orders').values({ sku }).execute();
 *
 * Why: lib/data-layers/connection-setup.ts `sessionSetsOf` takes a text as a data layer's setup
 * only if it matches `/^\s*set\s/i` before the SQL parser reads it; a text that begins with a
 * comment fails that test, so `PoolTransaction.onView` does not make it `SET LOCAL`, and the
 * statement is refused as a session `SET search_path` (`SessionSettingRefusedError`). The
 * parser (`statementsOf`) already reads the comment as nothing; only the pre-test stops it.
 *
 * Docs: docs/guides/kysely.md: "a hook that sets the search path or the role (`SET search_path
 * TO shop, public` ...: each `SET` the hook sends before its first other statement) runs in
 * every request, as the request transaction's `SET LOCAL`"; docs/guides/data-layers.md: "the
 * first statements on a view that set the search path or the role for the session ... are run
 * as `SET LOCAL`". The commented text is one such SET, as PostgreSQL reads it.
 *
 * Severity: medium (every keyed request of an app with such a hook answers 500 and stores it:
 * the retry replays the 500 for the retention window; nothing committed twice. The refusal's
 * advice, `SET LOCAL`, does not fit a hook that also runs outside requests).
 *
 * Fails now: the commented hook answers 500 ("Internal server error", the refusal) and its
 * retry replays it (`Idempotent-Replayed: true`), no order kept. Control: the hook without the
 * comment answers 201, the order kept in `shop.orders`, the session's search path untouched.
 *
 * Suggested fix: in `sessionSetsOf`, drop the `/^\s*set\s/i` pre-test (or strip leading
 * comments before it) and let `statementsOf` + `setOf` decide; `setupAsLocal` then rewrites
 * each statement from its own text, which must skip a leading comment too (its regexp anchors
 * `set` at the start of `statement.text`).
 *
 * Fixed: lib/data-layers/connection-setup.ts `sessionSetsOf` lets a text that begins with a
 * comment reach the parser (as `nestedControlOf` does), and `setupAsLocal` finds the `SET` (and
 * `SESSION`) it replaces with PostgreSQL's lexer (`tokensOf`, lib/transaction/sql/sql-parse.ts),
 * so a comment before or between them is read as nothing; unit cases in connection-setup.spec.ts.
 */
import { Body, Controller, HttpCode, Module, Post } from '@nestjs/common';
import { CompiledQuery, Kysely, PostgresDialect } from 'kysely';
import { type Pool } from 'pg';
import request from 'supertest';
import { IdempotencyModule, Idempotent } from '../../../lib/index.js';
import { type PoolApp, startPoolApp } from '../../support/pool-app.js';

interface Db {
  orders: { id: string; sku: string };
}

const SETUPS = {
  plain: 'SET search_path TO shop, public',
  line: '-- the tenant schema first\nSET search_path TO shop, public',
  block: '/* tenant */ SET search_path TO shop, public',
} as const;
type Shape = keyof typeof SETUPS;

let pool: Pool;
const dbs = {} as Record<Shape, Kysely<Db>>;

@Controller('orders')
class OrdersController {
  @Post()
  @HttpCode(201)
  @Idempotent()
  async place(@Body() body: { sku: string; shape: Shape }) {
    await dbs[body.shape]
      .insertInto('orders')
      .values({ sku: body.sku } as never)
      .execute();
    return { sku: body.sku };
  }
}

describe("adversary 80 pool: a Kysely setup hook's SET after a comment is refused", () => {
  let fixture: PoolApp;

  beforeAll(async () => {
    @Module({
      imports: [IdempotencyModule.forRootAsync({ useFactory: () => ({ globalKeys: true, pool }) })],
      controllers: [OrdersController],
    })
    class OrdersModule {}
    fixture = await startPoolApp('adv80_pool_setup_comment', {
      module: OrdersModule,
      max: 4,
      usePool: (started) => {
        pool = started;
        for (const shape of Object.keys(SETUPS) as Shape[]) {
          dbs[shape] = new Kysely<Db>({
            dialect: new PostgresDialect({
              pool: started,
              onCreateConnection: async (connection) => {
                await connection.executeQuery(CompiledQuery.raw(SETUPS[shape]));
              },
            }),
          });
        }
      },
      setup: async (owner) => {
        await owner.query(`CREATE SCHEMA shop`);
        await owner.query(`CREATE TABLE shop.orders (id bigserial PRIMARY KEY, sku text NOT NULL)`);
      },
    });
  }, 60_000);

  afterAll(async () => {
    await fixture?.close();
  });

  async function place(shape: Shape) {
    const post = () =>
      request(fixture.app.getHttpServer())
        .post('/orders')
        .set('Idempotency-Key', `key-${shape}`)
        .send({ sku: shape, shape })
        .timeout(30_000);
    const first = await post();
    const retried = await post();
    const { rows } = await fixture.admin.query<{ n: number }>(
      `SELECT count(*)::int AS n FROM shop.orders WHERE sku = $1`,
      [shape],
    );
    return { first: first.status, retried: retried.status, kept: rows[0].n };
  }

  it('control: the hook without a comment runs as the request SET LOCAL (201, kept)', async () => {
    expect(await place('plain')).toEqual({ first: 201, retried: 201, kept: 1 });
  }, 60_000);

  it('the same SET after a line or block comment runs the same', async () => {
    expect({ line: await place('line'), block: await place('block') }).toEqual({
      line: { first: 201, retried: 201, kept: 1 },
      block: { first: 201, retried: 201, kept: 1 },
    });
  }, 60_000);
});
