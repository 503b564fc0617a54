import { Body, Controller, Post } from '@nestjs/common';
import { InjectDataSource } from '@nestjs/typeorm';
import request from 'supertest';
import { DataSource } from 'typeorm';
import { Idempotent } from '../../../lib/index.js';
import { startTypeormApp, type TypeormApp } from '../../support/typeorm-app.js';

/**
 * Adversary, round 19: on TypeORM, a `dataSource.transaction()` begun beside another that is
 * still open leaves, at its COMMIT, the cursors its code opened; the next one fails for ever.
 *
 * What the app does (TypeORM, the library's usual seam): an import request records a batch in
 * a transaction (`dataSource.transaction`), and inside its callback books each line in a
 * transaction of its own (`dataSource.transaction` again, on the DataSource: a booking service
 * that opens its own transaction, meant to stand alone; transactions.md describes this shape:
 * "work running beside it ... runs inside that nested transaction"). A booking reads its
 * receipt through a cursor, the way PostgreSQL's docs show it: either a `DECLARE receipt
 * CURSOR FOR ...; FETCH ALL IN receipt` left to the COMMIT to close, or a PL/pgSQL function
 * that returns its receipt in a cursor the caller names (plpgsql docs 43.7.3.5, "Returning
 * Cursors": `SELECT reffunc('funccursor'); FETCH ALL IN funccursor; COMMIT;`). Without the
 * library (the control, no `@Idempotent()`): 201, every line booked, since each booking runs
 * on a connection of its own and its COMMIT closes its cursor.
 *
 * What happens: on the request's one connection each booking is a savepoint at depth 3 inside
 * the batch's (lazy-transaction.ts `commitFrom`: only the outermost nested commit, depth 2,
 * ends what a COMMIT would end, `NestedCommit.endingText`). So the booking's COMMIT is a bare
 * `RELEASE SAVEPOINT`, `receipt` stays open, and the second booking's DECLARE / OPEN fails:
 * 42P03 cursor "receipt" already in use. 500, nothing kept, on every retry of the key.
 * Round 18 fixed exactly this on the pool seam (`inside`: cursors opened since the savepoint
 * began are closed, 15df4f1); TypeORM's seam has no such step.
 *
 * What should happen: transactions.md: a nested transaction's COMMIT ends what its own
 * COMMIT would have ended without the library ("every cursor not WITH HOLD closed"); for a
 * transaction begun beside another, "its COMMIT closes only the cursors opened since it began
 * (a DECLARE, or a function's own)" (said for the pool seam; nothing says TypeORM differs);
 * the promise: "a correct program never fails for ever because of the library". Expected:
 * 201, every line booked once, the retry replayed.
 *
 * Why it matters: a correct program fails for ever on every key. Low to medium: a service that
 * opens its own `dataSource.transaction()` called from inside another's callback is common in
 * NestJS code, and relying on COMMIT to close a cursor is PostgreSQL's documented idiom.
 */
@Controller()
class ImportsController {
  constructor(@InjectDataSource() private readonly dataSource: DataSource) {}

  private async importBatch(batch: string, how: 'declare' | 'function') {
    await this.dataSource.transaction(async (batchTx) => {
      await batchTx.query('INSERT INTO batches (batch) VALUES ($1)', [batch]);
      for (const line of [1, 2, 3]) {
        // Each line booked on its own (a service's own transaction), its receipt read
        // through a cursor that its COMMIT closes.
        await this.dataSource.transaction(async (booking) => {
          if (how === 'declare') {
            await booking.query('INSERT INTO bookings (batch, line) VALUES ($1, $2)', [
              batch,
              line,
            ]);
            await booking.query(
              `DECLARE receipt CURSOR FOR SELECT batch, line FROM bookings WHERE batch = '${batch}'`,
            );
          } else {
            await booking.query(`SELECT book_line($1, $2, 'receipt')`, [batch, line]);
          }
          await booking.query('FETCH ALL IN receipt');
        });
      }
    });
    return { batch };
  }

  @Post('plain')
  plain(@Body() body: { batch: string; how: 'declare' | 'function' }) {
    return this.importBatch(body.batch, body.how);
  }

  @Post('idempotent')
  @Idempotent()
  idempotent(@Body() body: { batch: string; how: 'declare' | 'function' }) {
    return this.importBatch(body.batch, body.how);
  }
}

describe('adversary 19: TypeORM, a nested COMMIT beside another leaves its cursor open', () => {
  let typeorm: TypeormApp;

  beforeAll(async () => {
    typeorm = await startTypeormApp('adv19_typeorm_beside_cursor', {
      controllers: [ImportsController],
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
    await typeorm?.close();
  });

  const booked = async (batch: string) =>
    (
      await typeorm.admin.query<{ line: number }>(
        'SELECT line FROM bookings WHERE batch = $1 ORDER BY line',
        [batch],
      )
    ).rows.map((row) => row.line);

  const post = (path: string, batch: string, how: string, key?: string) => {
    const call = request(typeorm.app.getHttpServer()).post(path).timeout(10_000);
    return (key ? call.set('Idempotency-Key', key) : call).send({ batch, how });
  };

  it.each(['declare', 'function'] as const)(
    'without the library (no @Idempotent), %s: 201, each line booked once (control)',
    async (how) => {
      const answer = await post('/plain', `plain-${how}`, how);
      expect({
        status: answer.status,
        body: answer.body as unknown,
        booked: await booked(`plain-${how}`),
      }).toEqual({ status: 201, body: { batch: `plain-${how}` }, booked: [1, 2, 3] });
    },
    20_000,
  );

  it.each(['declare', 'function'] as const)(
    'under @Idempotent(), %s: 201 once, replayed, each line booked once',
    async (how) => {
      const first = await post('/idempotent', how, how, `import-${how}`);
      const retry = await post('/idempotent', how, how, `import-${how}`);
      // Observed: { first: 500, retry: 500, booked: [] } (42P03: cursor "receipt" already in
      // use, left open by the first booking's nested COMMIT).
      expect({
        first: first.status,
        body: first.body as unknown,
        retry: retry.status,
        same: retry.text === first.text,
        booked: await booked(how),
      }).toEqual({
        first: 201,
        body: { batch: how },
        retry: 201,
        same: true,
        booked: [1, 2, 3],
      });
    },
    20_000,
  );
});
