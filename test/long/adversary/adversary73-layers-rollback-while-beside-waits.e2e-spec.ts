/**
 * Adversary 73: a write sent beside a data layer's INNER savepoint (Drizzle's nested
 * `tx.transaction()`), through the service's own `db`, that is still on its way when that
 * savepoint rolls back is rolled back with it in silence:
 * the handler awaits the write, it resolved, the request answers 201, the 201 is stored and
 * replayed, and the row is not there. Without the library the write commits on a connection
 * of its own. Awaited before the rollback, the same write makes the rollback refused (500,
 * nothing kept): the loss depends only on the write being still in flight.
 *
 *   let audit: Promise<unknown> | undefined;
 *   await db.transaction(async (tx) => {
 *     await tx.insert(notes).values({ tag, what: 'reserved' });
 *     await tx.transaction(async (gift) => {                                // savepoint sp1
 *       await gift.insert(notes).values({ tag, what: 'step' });
 *       audit = db.insert(notes).values({ tag, what: 'audit' }).execute(); // the service's db
 *       gift.rollback();                                       // rollback to savepoint sp1
 *     }).catch(() => undefined);
 *   });
 *   await audit;                                                           // resolved
 *   return { tag };
 *
 * Why: `PoolTransaction.statement()` (lib/data-layers/pool-transaction.ts) marks a statement
 * beside the nested transactions "as it is sent" (`markBeside`, after `await
 * this.connection()` and `await this.makeSavepoints(...)`), but a data layer's own `ROLLBACK TO SAVEPOINT sp1` is judged at once,
 * when its text is taken (`noteInside`, synchronous in `statement()` before any await, looks
 * at `InnerSavepoint.beside` and splices the savepoint off `this.inner`). The audit, taken first, is sent first on the request's one
 * connection (inside the savepoint), but is marked only after the rollback looked at
 * `beside`: nothing is refused and the `ROLLBACK TO SAVEPOINT` behind it takes it along.
 *
 * Expected (docs/guides/data-layers.md): "A statement sent beside an open nested transaction
 * ... runs inside it ... if it rolls back, it would take the statement along, where without
 * the library that statement commits on a connection of its own, so the rollback is refused
 * with `StatementBesideNestedTransactionError` and the whole request rolls back." So: the
 * audit kept with the 201, or the request refused (500, nothing kept); never a stored 201
 * without it.
 *
 * Control: the audit awaited before the rollback: refused, 500, nothing kept; the same
 * code without `@Idempotent()`: 201, the audit kept; and the same in-flight audit beside the
 * OUTER nested transaction's rollback (`tx.rollback()`): held (kept or refused).
 *
 * Severity: high (an awaited, successful write lost while the answer that says it happened
 * is stored and replayed; no error anywhere).
 *
 * Fails now: 'Expected: "audit kept or refused", Received: "201 stored, rows [\"reserved\"]: the audit
 * row is gone"' for the inner savepoint ("inner true"); the outer case and the four
 * controls pass.
 *
 * Fixed: a data layer's own savepoint statements are followed as they are SENT (`noteSent`,
 * lib/data-layers/pool-transaction.ts), in the order the connection runs them: the ROLLBACK TO
 * is judged on what was sent before it, the write sent first included.
 */
import { Body, Controller, Module, Post } from '@nestjs/common';
import { drizzle, type NodePgDatabase } from 'drizzle-orm/node-postgres';
import { pgTable, serial, text } from 'drizzle-orm/pg-core';
import { type Pool } from 'pg';
import request from 'supertest';
import { IdempotencyModule, Idempotent } from '../../../lib/index.js';
import { type PoolApp, startPoolApp } from '../../support/pool-app.js';

const notes = pgTable('adv73r_notes', {
  id: serial('id').primaryKey(),
  tag: text('tag').notNull(),
  what: text('what').notNull(),
});

let pool: Pool;
let db: NodePgDatabase;

type Body73 = { tag: string; inner?: boolean; awaited?: boolean };

async function work(body: Body73) {
  const { tag } = body;
  let audit: Promise<unknown> | undefined;
  await db
    .transaction(async (tx) => {
      await tx.insert(notes).values({ tag, what: 'reserved' });
      const step = async (scope: typeof tx) => {
        await scope.insert(notes).values({ tag, what: 'step' });
        audit = db.insert(notes).values({ tag, what: 'audit' }).execute();
        if (body.awaited) await audit;
        scope.rollback(); // out of stock
      };
      if (body.inner) {
        await tx.transaction((gift) => step(gift)).catch(() => undefined);
      } else {
        await step(tx);
      }
    })
    .catch(() => undefined);
  await audit;
  return { tag, placed: true };
}

@Controller()
class NotesController {
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
  controllers: [NotesController],
})
class NotesModule {}

describe('adversary 73: a write in flight beside a nested transaction that rolls back', () => {
  let fixture: PoolApp;

  beforeAll(async () => {
    fixture = await startPoolApp('adv73_rollback_while_beside', {
      module: NotesModule,
      max: 4,
      usePool: (started) => {
        pool = started;
        db = drizzle({ client: started });
      },
      setup: async (admin) => {
        await admin.query(
          'CREATE TABLE adv73r_notes (id serial PRIMARY KEY, tag text NOT NULL, what text NOT NULL)',
        );
      },
    });
  }, 60_000);

  afterAll(async () => {
    await fixture?.close();
  });

  const kept = async (tag: string) =>
    (
      await fixture.admin.query<{ what: string }>(
        'SELECT what FROM adv73r_notes WHERE tag = $1 ORDER BY what',
        [tag],
      )
    ).rows.map((row) => row.what);

  const post = (path: string, key: string | undefined, body: Body73) => {
    const call = request(fixture.app.getHttpServer()).post(path);
    if (key) call.set('Idempotency-Key', key);
    return call.send(body);
  };

  it.each([false, true])(
    'control (inner %s): without @Idempotent() the audit is kept',
    async (inner) => {
      const tag = `plain-${inner}`;
      const answer = await post('/plain', undefined, { tag, inner });
      expect(answer.status).toBe(201);
      expect(await kept(tag)).toEqual(inner ? ['audit', 'reserved'] : ['audit']);
    },
    20_000,
  );

  it.each([false, true])(
    'control (inner %s): the audit awaited before the rollback: refused, 500, nothing kept',
    async (inner) => {
      const tag = `awaited-${inner}`;
      const answer = await post('/keyed', tag, { tag, inner, awaited: true });
      expect(answer.status).toBe(500);
      expect(await kept(tag)).toEqual([]);
    },
    20_000,
  );

  it.each([false, true])(
    'inner %s: the audit still in flight at the rollback is kept (or the request refused), never a 201 without it',
    async (inner) => {
      const tag = `inflight-${inner}`;
      const answer = await post('/keyed', tag, { tag, inner });
      const rows = await kept(tag);
      const outcome =
        answer.status === 201 && !rows.includes('audit')
          ? `${answer.status} stored, rows ${JSON.stringify(rows)}: the audit row is gone`
          : 'audit kept or refused';
      expect(outcome).toBe('audit kept or refused');
    },
    20_000,
  );
});
