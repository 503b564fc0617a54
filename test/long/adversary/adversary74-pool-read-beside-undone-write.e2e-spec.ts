/**
 * Adversary 74: a nested transaction whose only write was undone by its data layer's own
 * savepoint (Drizzle's nested `tx.transaction()`: the gift wrap, refused and rolled back to
 * `sp1`) still counts as one that "wrote": a plain read beside it afterwards (the
 * availability service's own `db`) marks it, and its later rollback (the payment declined)
 * is refused with `StatementBesideNestedTransactionError`: 500, nothing kept, on every try,
 * for code that is correct and runs without the library. The read saw nothing uncommitted
 * (the gift's row was gone before it ran) and loses nothing.
 *
 *   await db.transaction(async (tx) => {
 *     await tx.transaction(async (gift) => {                         // savepoint sp1
 *       await gift.insert(holds).values({ tag, what: 'gift' });
 *       gift.rollback();                                             // no gift wrap today
 *     }).catch(() => undefined);                                     // rollback to sp1
 *     const [{ n }] = await db.select({ n: count() }).from(holds)     // the service's db
 *       .where(eq(holds.tag, tag));
 *     held = n;                                                      // 0
 *     tx.rollback();                                                 // payment declined
 *   }).catch(() => undefined);
 *   return { tag, held };                                            // 201 { held: 0 }
 *
 * Why: `PoolTransaction.noteSent` (lib/data-layers/pool-transaction.ts) sets `wrote` on EVERY
 * savepoint of the view (`for (const savepoint of view.savepoints) savepoint.wrote = true`)
 * for a write made inside a data layer's own savepoint; the `ROLLBACK TO SAVEPOINT sp1` that
 * undoes it clears `wrote` on that inner savepoint only (`kept.wrote = false`), never on the
 * nested transaction around it. `markBeside` then marks the nested transaction for the read
 * ("may have seen what the nested transaction wrote before it"), and `rollBack` refuses.
 *
 * Expected (docs/guides/data-layers.md): "A plain read beside it loses nothing and is let
 * through"; round 73's rule refuses only a read beside a nested transaction that has written
 * (a write the read may have seen). Here nothing written survives when the read runs. So:
 * 201 `{ held: 0 }`, as without the library.
 *
 * Control: without `@Idempotent()`: 201, `held: 0`; the same code with the gift's row never
 * written (the nested `tx.transaction()` rolled back empty): 201, `held: 0`; the gift written
 * and rolled back with no read beside: 201 (the read alone turns it into a refusal).
 *
 * Fails now: 'Expected { status: 201, held: 0 }, Received { status: 500, held: undefined }'
 * (500 `transaction_aborted`: the outer rollback was refused); the three controls pass.
 *
 * Severity: low to medium (a false refusal: a correct request answers 500 on every try;
 * nothing is lost or run twice).
 *
 * Suggested fix: keep `wrote` per savepoint as it stands: a data layer's own savepoint notes
 * whether what encloses it had written when it was made, and its `ROLLBACK TO` puts that back
 * on the nested transaction (and on the savepoints around it) instead of leaving it set.
 *
 * Fixed: a data layer's own savepoint keeps whether those around it had written when it was made
 * (`wroteBefore`) and puts that back when rolled back to.
 */
import { Body, Controller, Module, Post } from '@nestjs/common';
import { count, eq } from 'drizzle-orm';
import { drizzle, type NodePgDatabase } from 'drizzle-orm/node-postgres';
import { pgTable, serial, text } from 'drizzle-orm/pg-core';
import { type Pool } from 'pg';
import request from 'supertest';
import { IdempotencyModule, Idempotent } from '../../../lib/index.js';
import { type PoolApp, startPoolApp } from '../../support/pool-app.js';

const holds = pgTable('adv74r_holds', {
  id: serial('id').primaryKey(),
  tag: text('tag').notNull(),
  what: text('what').notNull(),
});

let pool: Pool;
let db: NodePgDatabase;

type Body74 = { tag: string; empty?: boolean; noRead?: boolean };

async function work(body: Body74) {
  const { tag } = body;
  let held = -1;
  await db
    .transaction(async (tx) => {
      await tx
        .transaction(async (gift) => {
          if (!body.empty) await gift.insert(holds).values({ tag, what: 'gift' });
          gift.rollback(); // no gift wrap today
        })
        .catch(() => undefined);
      if (body.noRead) held = 0;
      else {
        const [{ n }] = await db.select({ n: count() }).from(holds).where(eq(holds.tag, tag));
        held = n;
      }
      tx.rollback(); // payment declined
    })
    .catch(() => undefined);
  return { tag, held };
}

@Controller()
class HoldsController {
  @Post('keyed')
  @Idempotent()
  keyed(@Body() body: Body74) {
    return work(body);
  }

  @Post('plain')
  plain(@Body() body: Body74) {
    return work(body);
  }
}

@Module({
  imports: [IdempotencyModule.forRootAsync({ useFactory: () => ({ globalKeys: true, pool }) })],
  controllers: [HoldsController],
})
class HoldsModule {}

describe('adversary 74: a read beside a nested transaction whose write was undone by its savepoint', () => {
  let fixture: PoolApp;

  beforeAll(async () => {
    fixture = await startPoolApp('adv74_read_beside_undone', {
      module: HoldsModule,
      max: 4,
      usePool: (started) => {
        pool = started;
        db = drizzle({ client: started });
      },
      setup: async (admin) => {
        await admin.query(
          'CREATE TABLE adv74r_holds (id serial PRIMARY KEY, tag text NOT NULL, what text NOT NULL)',
        );
      },
    });
  }, 60_000);

  afterAll(async () => {
    await fixture?.close();
  });

  const post = (path: string, key: string | undefined, body: Body74) => {
    const call = request(fixture.app.getHttpServer()).post(path);
    if (key) call.set('Idempotency-Key', key);
    return call.send(body);
  };

  it('control: without @Idempotent(): 201, held 0', async () => {
    const answer = await post('/plain', undefined, { tag: 'plain' });
    expect({ status: answer.status, held: answer.body.held }).toEqual({ status: 201, held: 0 });
  }, 20_000);

  it('control: the nested savepoint rolled back empty: 201, held 0', async () => {
    const answer = await post('/keyed', 'empty', { tag: 'empty', empty: true });
    expect({ status: answer.status, held: answer.body.held }).toEqual({ status: 201, held: 0 });
  }, 20_000);

  it('control: the gift written and rolled back, no read beside: 201', async () => {
    const answer = await post('/keyed', 'no-read', { tag: 'no-read', noRead: true });
    expect({ status: answer.status, held: answer.body.held }).toEqual({ status: 201, held: 0 });
  }, 20_000);

  it('the gift written and rolled back to sp1 before the read: 201, held 0 (every try)', async () => {
    const answer = await post('/keyed', 'gift', { tag: 'gift' });
    // Received: 500 (the outer rollback refused: StatementBesideNestedTransactionError).
    expect({ status: answer.status, held: answer.body.held }).toEqual({ status: 201, held: 0 });
  }, 20_000);
});
