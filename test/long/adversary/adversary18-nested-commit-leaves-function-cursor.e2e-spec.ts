import { Body, Controller, Module, Post } from '@nestjs/common';
import { sql } from 'drizzle-orm';
import { drizzle, type NodePgDatabase } from 'drizzle-orm/node-postgres';
import { type Pool } from 'pg';
import request from 'supertest';
import { IdempotencyModule, Idempotent } from '../../../lib/index.js';
import { type PoolApp, startPoolApp } from '../../support/pool-app.js';

/**
 * Adversary, round 18: a nested transaction begun beside another that is still open leaves,
 * at its COMMIT, a cursor its code opened through a function; the next one fails for ever.
 *
 * What the app does (Drizzle on the pool given to the library): an import request records a
 * batch in a transaction (`db.transaction`), and inside its callback books each line in a
 * transaction of its own (`db.transaction` again, on `db`: each booking is meant to stand
 * alone, as in adversary 17's nested-commit files, a shape transactions.md allows). A booking
 * calls a PL/pgSQL function that returns its receipt in a cursor the caller names, exactly
 * PostgreSQL's own example of "Returning Cursors" (plpgsql docs, 43.7.3.5: `SELECT
 * reffunc('funccursor'); FETCH ALL IN funccursor; COMMIT;`): `SELECT book_line(…, 'receipt')`,
 * then `FETCH ALL IN receipt`, and its COMMIT closes the cursor. Without the library (the
 * control, no `@Idempotent()`): 201, every line booked.
 *
 * What happens: on the request's one connection each booking is a savepoint inside the
 * batch's (`inside`, pool-transaction.ts). Since round 17's fix its COMMIT closes "only the
 * cursors it declared" (`endingText(true, inside)`: names read from `DECLARE` texts); the
 * function's `OPEN` declared nothing in the text, so `receipt` stays open after the booking's
 * COMMIT. The second booking's `OPEN receipt` fails: 42P03 cursor "receipt" already in use.
 * 500, nothing kept, on every retry of the key.
 *
 * What should happen: transactions.md: a nested transaction's COMMIT ends what its own COMMIT
 * would have ended without the library, its cursors included ("its COMMIT closes only the
 * cursors it declared" was meant as: its own, not the other's); the promise: "a correct
 * program never fails for ever because of the library". Expected: 201, every line booked
 * once, the retry replayed.
 *
 * Why it matters: a correct program fails for ever. Low to medium: refcursor-returning
 * functions are PostgreSQL's documented way to return several result sets and are common in
 * databases with stored-procedure APIs; each booking standing alone inside a batch's
 * transaction is the shape adversary 17 showed.
 */
let db: NodePgDatabase;

async function importBatch(batch: string) {
  await db.transaction(async (batchTx) => {
    await batchTx.execute(sql`INSERT INTO batches (batch) VALUES (${batch})`);
    for (const line of [1, 2, 3]) {
      // Each line booked on its own, its receipt returned in a cursor named by the caller.
      await db.transaction(async (booking) => {
        await booking.execute(sql`SELECT book_line(${batch}, ${line}, 'receipt')`);
        await booking.execute(sql`FETCH ALL IN receipt`);
      });
    }
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

let thePool: Pool;
const poolOf = () => thePool;

@Module({
  imports: [
    IdempotencyModule.forRootAsync({ useFactory: () => ({ globalKeys: true, pool: poolOf() }) }),
  ],
  controllers: [ImportsController],
})
class ImportsModule {}

describe('adversary 18: a nested COMMIT inside another leaves a cursor a function opened', () => {
  let fixture: PoolApp;

  beforeAll(async () => {
    fixture = await startPoolApp('adv18_function_cursor', {
      module: ImportsModule,
      max: 4,
      usePool: (started) => {
        thePool = started;
        db = drizzle(started);
      },
      setup: async (admin) => {
        await admin.query('CREATE TABLE batches (batch text PRIMARY KEY)');
        await admin.query('CREATE TABLE bookings (batch text NOT NULL, line int NOT NULL)');
        await admin.query(`
          CREATE FUNCTION book_line(b text, l int, receipt refcursor) RETURNS refcursor
          LANGUAGE plpgsql AS $$
          BEGIN
            INSERT INTO bookings (batch, line) VALUES (b, l);
            OPEN receipt FOR SELECT batch, line FROM bookings WHERE batch = b AND line = l;
            RETURN receipt;
          END $$`);
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
    }).toEqual({ status: 201, body: { batch: 'a' }, booked: [1, 2, 3] });
  }, 20_000);

  it('under @Idempotent(): 201 once, replayed, each line booked once', async () => {
    const first = await post('/idempotent', 'b', 'import-1');
    const retry = await post('/idempotent', 'b', 'import-1');
    // Observed: { first: 500, retry: 500, booked: [] } (42P03: cursor "receipt" already in
    // use, left open by the first booking's nested COMMIT).
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
      booked: [1, 2, 3],
    });
  }, 20_000);
});
