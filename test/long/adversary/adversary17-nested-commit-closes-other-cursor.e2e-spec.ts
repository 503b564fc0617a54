import { Body, Controller, Module, Post } from '@nestjs/common';
import { sql } from 'drizzle-orm';
import { drizzle, type NodePgDatabase } from 'drizzle-orm/node-postgres';
import { type Pool } from 'pg';
import request from 'supertest';
import { IdempotencyModule, Idempotent } from '../../../lib/index.js';
import { type PoolApp, startPoolApp } from '../../support/pool-app.js';

/**
 * Adversary, round 17: a nested transaction's COMMIT closes a cursor of another transaction
 * that is still open and being read.
 *
 * What the app does (Drizzle on the pool given to the library): an import request walks the
 * lines of a batch with a cursor, in a transaction of its own (`db.transaction`, `DECLARE
 * lines CURSOR FOR …`, `FETCH 2 FROM lines` until empty), and books each line in a
 * transaction of its own (`db.transaction` again, on `db`, not on the walk's `tx`: each
 * booking is meant to stand alone). Without the library (the control, no `@Idempotent()`):
 * 201, each line booked once; the bookings run on other connections of the pool, and their
 * COMMITs leave the walk's cursor alone.
 *
 * What happens: on the request's one connection each booking is a savepoint beside the
 * walk's, an "outermost" nested transaction of its own (its own view of the pool). At its
 * COMMIT the library ends what that COMMIT would have ended (lib/data-layers/nested-commit.ts,
 * `endingText`): it closes "every cursor not WITH HOLD … whoever opened it" (a sweep over
 * `pg_cursors`), which here is the walk's `lines`, still open in the transaction that declared
 * it. The walk's next `FETCH` fails (34000, cursor "lines" does not exist): 500, nothing kept,
 * on every retry.
 *
 * What should happen: docs/guides/transactions.md: a nested transaction's COMMIT ends "what
 * [its] own COMMIT would have ended without the library"; the cursors it closes are to be
 * those of its own code (a COMMIT ends the cursors of its own transaction, never another
 * transaction's). Statements beside a nested transaction are allowed ("a commit keeps both, as
 * the app meant"). Expected: 201, each line booked once, the retry replayed.
 *
 * Why it matters: a correct program fails for ever. Medium-low: a cursor walk whose items
 * commit one by one on their own is a batch-import pattern; inside an HTTP request handler it
 * is less common, but nothing in the docs warns against it.
 */
let db: NodePgDatabase;

async function importBatch(batch: string) {
  await db.transaction(async (walk) => {
    await walk.execute(
      sql`DECLARE lines CURSOR FOR SELECT line FROM batch_lines WHERE batch = ${batch} ORDER BY line`,
    );
    for (;;) {
      const fetched = await walk.execute(sql`FETCH 2 FROM lines`);
      if (fetched.rows.length === 0) break;
      for (const row of fetched.rows as { line: number }[]) {
        // Each line booked on its own.
        await db.transaction(async (booking) => {
          await booking.execute(
            sql`INSERT INTO bookings (batch, line) VALUES (${batch}, ${row.line})`,
          );
        });
      }
    }
    await walk.execute(sql`CLOSE lines`);
  });
  return { batch };
}

@Controller()
class ImportsController {
  @Post('plain')
  plain(@Body() body: { batch: string }) {
    return importBatch(body.batch);
  }

  @Post('idempotent')
  @Idempotent()
  idempotent(@Body() body: { batch: string }) {
    return importBatch(body.batch);
  }
}

@Module({
  imports: [
    IdempotencyModule.forRootAsync({ useFactory: () => ({ globalKeys: true, pool: poolOf() }) }),
  ],
  controllers: [ImportsController],
})
class ImportsModule {}

let thePool: Pool;
const poolOf = () => thePool;

describe('adversary 17: a nested COMMIT closes the cursor of another open transaction', () => {
  let fixture: PoolApp;

  beforeAll(async () => {
    fixture = await startPoolApp('adv17_cursor_sweep', {
      module: ImportsModule,
      max: 4,
      usePool: (started) => {
        thePool = started;
        db = drizzle(started);
      },
      setup: async (admin) => {
        await admin.query('CREATE TABLE batch_lines (batch text NOT NULL, line int NOT NULL)');
        await admin.query('CREATE TABLE bookings (batch text NOT NULL, line int NOT NULL)');
        await admin.query(
          "INSERT INTO batch_lines SELECT b, g FROM unnest(ARRAY['a', 'b']) b, generate_series(1, 5) g",
        );
      },
    });
  }, 60_000);

  afterAll(async () => {
    await fixture?.close();
  });

  const booked = async (batch: string) =>
    (
      await fixture.admin.query('SELECT line FROM bookings WHERE batch = $1 ORDER BY line', [batch])
    ).rows.map((row: { line: number }) => row.line);

  const post = (path: string, batch: string, key?: string) => {
    const call = request(fixture.app.getHttpServer()).post(path);
    return (key ? call.set('Idempotency-Key', key) : call).send({ batch });
  };

  it('without the library (no @Idempotent): 201, each line booked once (control)', async () => {
    const answer = await post('/plain', 'a');
    expect({
      status: answer.status,
      body: answer.body as unknown,
      booked: await booked('a'),
    }).toEqual({ status: 201, body: { batch: 'a' }, booked: [1, 2, 3, 4, 5] });
  }, 20_000);

  it('under @Idempotent(): 201 once, replayed, each line booked once', async () => {
    const first = await post('/idempotent', 'b', 'import-1');
    const retry = await post('/idempotent', 'b', 'import-1');
    // Observed: { first: 500, retry: 500, booked: [] } (34000: cursor "lines" does not exist,
    // closed by the first booking's nested COMMIT).
    expect({
      first: first.status,
      body: first.body as unknown,
      retry: retry.status,
      same: retry.text === first.text,
      booked: await booked('b'),
    }).toEqual({
      first: 201,
      body: { batch: 'b' },
      retry: 201,
      same: true,
      booked: [1, 2, 3, 4, 5],
    });
  }, 20_000);
});
