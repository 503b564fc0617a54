/**
 * Adversary 73: a plain read sent beside a nested transaction (the availability service's
 * own `db`, inside `db.transaction()`'s callback) sees that nested transaction's uncommitted
 * rows; the nested transaction then rolls back, and since round 72 that rollback is let
 * through: the request answers 201 with a count that includes a row that never existed,
 * and that answer is stored and replayed. Without the library the read runs on a connection
 * of its own and cannot see an uncommitted row (0); before round 72's fix (3) the rollback
 * was refused (500, nothing kept).
 *
 *   await db.transaction(async (tx) => {
 *     await tx.insert(holds).values({ tag });                       // hold a seat
 *     const [{ n }] = await db.select({ n: count() }).from(holds)    // the service's db
 *       .where(eq(holds.tag, tag));
 *     held = n;
 *     tx.rollback();                                                // payment declined
 *   }).catch(() => undefined);
 *   return { tag, held };                                           // 201 { held: 1 }
 *
 * Why: `PoolTransaction.markBeside` (lib/data-layers/pool-transaction.ts) returns at once for
 * a plain read ("A plain read rolled back loses nothing"), so `rollBack()` refuses nothing;
 * but the read ran INSIDE the savepoint on the request's one connection, and what it
 * returned is what the savepoint held, which the rollback then undoes: the read lost nothing
 * of its own, but the handler answered from data that was never committed (a dirty read
 * PostgreSQL never allows between connections).
 *
 * Expected (docs/guides/data-layers.md): "A statement sent beside an open nested transaction
 * ... runs inside it ... if it rolls back, it would take the statement along, where without
 * the library that statement commits on a connection of its own"; transactions.md's promise
 * that the answer stored is what the request's committed effects say. Without the library
 * the read answers 0. So: 201 with `held: 0`, or the request refused (500); never a stored
 * answer counting a row that was rolled back.
 *
 * Control: the same code without `@Idempotent()`: 201, `held: 0`; the same with the nested
 * transaction committing: 201, `held: 1`, the row there.
 *
 * Severity: medium (an answer built from a row that never existed is stored and replayed to
 * every retry; nothing is lost or written twice).
 *
 * Fails now: 'Expected: "as without the library, or refused", Received: "201 stored with
 * held 1, rows 0 (replayed)"' (the two controls pass).
 *
 * Fixed: a plain read beside a nested transaction that has written marks it (`wrote`,
 * `markBeside`): its rollback refuses the request; one that has written nothing lets it through.
 */
import { Body, Controller, Module, Post } from '@nestjs/common';
import { count, eq } from 'drizzle-orm';
import { drizzle, type NodePgDatabase } from 'drizzle-orm/node-postgres';
import { pgTable, serial, text } from 'drizzle-orm/pg-core';
import { type Pool } from 'pg';
import request from 'supertest';
import { IdempotencyModule, Idempotent } from '../../../lib/index.js';
import { type PoolApp, startPoolApp } from '../../support/pool-app.js';

const holds = pgTable('adv73h_holds', {
  id: serial('id').primaryKey(),
  tag: text('tag').notNull(),
});

let pool: Pool;
let db: NodePgDatabase;

type Body73 = { tag: string; commit?: boolean };

async function work(body: Body73) {
  const { tag } = body;
  let held = -1;
  await db
    .transaction(async (tx) => {
      await tx.insert(holds).values({ tag }); // hold a seat
      const [{ n }] = await db.select({ n: count() }).from(holds).where(eq(holds.tag, tag));
      held = n;
      if (!body.commit) tx.rollback(); // payment declined
    })
    .catch(() => undefined);
  return { tag, held };
}

@Controller()
class HoldsController {
  @Post('keyed')
  @Idempotent()
  keyed(@Body() body: Body73) {
    return work(body);
  }

  @Post('plain')
  plain(@Body() body: Body73) {
    return work(body);
  }
}

@Module({
  imports: [IdempotencyModule.forRootAsync({ useFactory: () => ({ globalKeys: true, pool }) })],
  controllers: [HoldsController],
})
class HoldsModule {}

describe('adversary 73: a read beside a nested transaction answers from its rolled-back rows', () => {
  let fixture: PoolApp;

  beforeAll(async () => {
    fixture = await startPoolApp('adv73_read_beside_rolled_back', {
      module: HoldsModule,
      max: 4,
      usePool: (started) => {
        pool = started;
        db = drizzle({ client: started });
      },
      setup: async (admin) => {
        await admin.query('CREATE TABLE adv73h_holds (id serial PRIMARY KEY, tag text NOT NULL)');
      },
    });
  }, 60_000);

  afterAll(async () => {
    await fixture?.close();
  });

  const rows = async (tag: string) =>
    (await fixture.admin.query('SELECT 1 FROM adv73h_holds WHERE tag = $1', [tag])).rowCount;

  const post = (path: string, key: string | undefined, body: Body73) => {
    const call = request(fixture.app.getHttpServer()).post(path);
    if (key) call.set('Idempotency-Key', key);
    return call.send(body);
  };

  it('control: without @Idempotent(): 201, held 0 (the read cannot see the uncommitted row)', async () => {
    const answer = await post('/plain', undefined, { tag: 'plain' });
    expect({ status: answer.status, held: answer.body.held, rows: await rows('plain') }).toEqual({
      status: 201,
      held: 0,
      rows: 0,
    });
  }, 20_000);

  it('control: the nested transaction commits: 201, held 1, the row there', async () => {
    const answer = await post('/keyed', 'commit', { tag: 'commit', commit: true });
    expect({ status: answer.status, held: answer.body.held, rows: await rows('commit') }).toEqual({
      status: 201,
      held: 1,
      rows: 1,
    });
  }, 20_000);

  it('rolled back: the stored answer does not count the rolled-back row (or the request is refused)', async () => {
    const answer = await post('/keyed', 'declined', { tag: 'declined' });
    const replay = await post('/keyed', 'declined', { tag: 'declined' });
    const now = await rows('declined');
    const outcome =
      answer.status === 201 && answer.body.held !== now
        ? `${answer.status} stored with held ${answer.body.held}, rows ${now}${
            replay.text === answer.text ? ' (replayed)' : ''
          }`
        : 'as without the library, or refused';
    expect(outcome).toBe('as without the library, or refused');
  }, 20_000);
});
