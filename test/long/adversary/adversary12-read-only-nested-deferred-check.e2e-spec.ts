import { Body, Controller, Module, Post } from '@nestjs/common';
import { sql } from 'drizzle-orm';
import { drizzle, type NodePgDatabase } from 'drizzle-orm/node-postgres';
import { type Pool } from 'pg';
import request from 'supertest';
import { IdempotencyModule, Idempotent } from '../../../lib/index.js';
import { type PoolApp, startPoolApp } from '../../support/pool-app.js';

/**
 * What a user does (Drizzle on the pool given to the library, docs/guides/drizzle.md): the
 * schema's `order_lines.order_id` references `orders` `DEFERRABLE INITIALLY DEFERRED` (lines
 * may be loaded before their order). The handler adds a line to an existing order
 * (`db.insert`), then reads the order's summary in a read-only Drizzle transaction
 * (`db.transaction(fn, { accessMode: 'read only' })`, the documented way to make a report's
 * reads consistent and safe) and answers it. Without the library the insert commits on its own
 * (its foreign key checked then), and the read-only transaction has nothing deferred: 201.
 *
 * What happens: in the request's transaction the insert's foreign-key check is still pending
 * when the read-only transaction commits; the library's deferred check before the RELEASE
 * (`SET CONSTRAINTS ALL IMMEDIATE`) runs it inside the read-only savepoint, where PostgreSQL
 * refuses the check's row lock: 25006 "cannot execute SELECT FOR KEY SHARE in a read-only
 * transaction". The read-only transaction's COMMIT fails: the request fails (500, or a 503
 * for ever as a read-only error), for a correct program whose constraint holds.
 *
 * What should happen: the nested COMMIT checks what its own transaction deferred as
 * PostgreSQL would (here nothing: a read-only transaction defers nothing), and leaves the
 * request's earlier statements' checks to the request's COMMIT, or checks them where a
 * check can run; 201 once, the line added once.
 *
 * Why it matters: a write followed by a read-only transaction for the answer is ordinary
 * handler code, and deferrable foreign keys are ordinary schema; together every such request
 * fails.
 */
let db: NodePgDatabase;
let pool: Pool;

type Line = { order: number; item: string };

async function addLine({ order, item }: Line) {
  await db.execute(sql`INSERT INTO order_lines (order_id, item) VALUES (${order}, ${item})`);
  const summary = await db
    .transaction(
      async (tx) => {
        const { rows } = await tx.execute<{ lines: number }>(
          sql`SELECT count(*)::int AS lines FROM order_lines WHERE order_id = ${order}`,
        );
        return rows[0];
      },
      { accessMode: 'read only' },
    )
    .catch((error: unknown) => {
      if (process.env.ADV_DEBUG) console.log((error as { cause?: unknown }).cause ?? error);
      throw error;
    });
  return { order, item, lines: summary.lines };
}

@Controller()
class LinesController {
  @Post('plain')
  plain(@Body() body: Line) {
    return addLine(body);
  }

  @Post('idempotent')
  @Idempotent()
  idempotent(@Body() body: Line) {
    return addLine(body);
  }
}

@Module({
  imports: [IdempotencyModule.forRootAsync({ useFactory: () => ({ globalKeys: true, pool }) })],
  controllers: [LinesController],
})
class LinesModule {}

describe('adversary 12: a read-only nested transaction after a write with a deferred foreign key fails its COMMIT', () => {
  let fixture: PoolApp;

  beforeAll(async () => {
    fixture = await startPoolApp('adv12_ro_deferred', {
      module: LinesModule,
      usePool: (started) => {
        pool = started;
        db = drizzle(started);
      },
      setup: async (admin) => {
        await admin.query(`
          CREATE TABLE orders (id int PRIMARY KEY);
          INSERT INTO orders VALUES (1), (2);
          CREATE TABLE order_lines (
            order_id int NOT NULL REFERENCES orders DEFERRABLE INITIALLY DEFERRED,
            item text NOT NULL)`);
      },
    });
  }, 60_000);

  afterAll(() => fixture?.close());

  const post = (path: string, body: Line, key?: string) => {
    const call = request(fixture.app.getHttpServer()).post(path);
    return (key ? call.set('Idempotency-Key', key) : call).send(body);
  };

  const itemsOf = async (order: number) => {
    const { rows } = await fixture.admin.query<{ item: string }>(
      'SELECT item FROM order_lines WHERE order_id = $1 ORDER BY item',
      [order],
    );
    return rows.map((row) => row.item);
  };

  it('without the library (no @Idempotent): 201, the line added (control)', async () => {
    const answer = await post('/plain', { order: 1, item: 'a' });
    expect({ status: answer.status, body: answer.body }).toEqual({
      status: 201,
      body: { order: 1, item: 'a', lines: 1 },
    });
  }, 20_000);

  it('under @Idempotent(): 201 once, the line added once', async () => {
    const answers: { status: number; body: unknown }[] = [];
    for (let attempt = 0; attempt < 3; attempt++) {
      const answer = await post('/idempotent', { order: 2, item: 'b' }, 'key-1');
      answers.push({ status: answer.status, body: answer.body });
      if (answer.status < 500) break;
    }
    expect({ answers, items: await itemsOf(2) }).toEqual({
      answers: [{ status: 201, body: { order: 2, item: 'b', lines: 1 } }],
      items: ['b'],
    });
  }, 20_000);
});
