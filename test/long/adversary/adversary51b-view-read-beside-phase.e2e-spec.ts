import { Body, Controller, Module, Post } from '@nestjs/common';
import { type Pool } from 'pg';
import request from 'supertest';
import { IdempotencyModule, Idempotent, PhaseRunner } from '../../../lib/index.js';
import { type PoolApp, startPoolApp } from '../../support/pool-app.js';

/**
 * Adversary, round 51b: a read (no write) beside a running phase, of a view of the app's.
 *
 * The app (the pool seam, node-postgres, READ COMMITTED, default `@Idempotent()`): `POST
 * /reserve` runs, in one `Promise.all`, a phase that inserts a reservation (`pool.query` inside
 * it, which joins the phase) and a read of the app's view `stock_levels` for the answer
 * (`pool.query('SELECT available FROM stock_levels WHERE sku = $1')`); then `finish()`. `POST /reserve-cte` is the same with the
 * read written as a `WITH ... SELECT` on the table. Nothing outside the phase writes.
 *
 * What happens: 500 `statement_beside_phase` ("a write of the request's own (outside any
 * phase) was sent while one of its phases ran"), nothing stored. The read is not a provable
 * plain read (a view of the app's, a WITH), so it goes to the request's transaction
 * (pool-transaction.ts `statement()`, the plain-read test at ~203), whose `connection()` refuses every statement while a
 * phase runs (request-transaction.ts:1082), read or write. Before c8a02ba this program
 * answered 201, replayed, the reservation once (checked against c8a02ba~1's lib/): the read
 * took no row lock the phase could wait on. Now the 500 is neither the answer nor true of the
 * handler, and the retries right after it meet 409 `key_in_progress` (observed: two, at
 * once): the phase still running beside the refused read commits after the release, and its
 * recovery point's `UPDATE` (postgres-statements.ts ADVANCE, `GREATEST(locked_until, ...)`
 * over the NULL the release left) leases the key again for `leaseMs`, with no worker on it.
 *
 * Expected: phases.md rule 9 and problems.md refuse "a write outside a phase sent while a
 * phase runs"; at READ COMMITTED "a read outside a phase" does not count. 201 at the first
 * try, the reservation once, replayed. (Or, if reads that open the transaction are to be
 * refused too, the docs and the problem's text saying so: they say "write".)
 *
 * Control: `POST /reserve-plain-read`, the same read of the table itself (a plain read, run
 * apart): 201.
 *
 * Severity: medium (an error where an answer is due, with a message not true of the handler;
 * nothing twice, the retry passes). On TypeORM the same reads get a stored generic 500 instead
 * (adversary51b-typeorm-write-beside-phase).
 *
 * Round 75: a `WITH` of reads is a plain read (`isPlainRead`, lib/transaction/sql/sql-text.ts),
 * run apart as the control's: `POST /reserve-cte` now answers 201, once; the view's read is
 * still refused as stated.
 */
class ReserveBody {
  sku!: string;
  ref!: string;
}

const VIEW_READ = 'SELECT available FROM stock_levels WHERE sku = $1';
const CTE_READ =
  'WITH s AS (SELECT sku, on_hand FROM stock WHERE sku = $1) SELECT on_hand AS available FROM s';
const PLAIN_READ = 'SELECT on_hand AS available FROM stock WHERE sku = $1';
let pool: Pool;

@Controller()
class ReserveController {
  constructor(private readonly phases: PhaseRunner) {}

  private async reserve(body: ReserveBody, read: string) {
    const [reservation, stock] = await Promise.all([
      this.phases.run('reserved', async () => {
        const { rows } = await pool.query<{ id: number }>(
          'INSERT INTO reservations (sku, ref) VALUES ($1, $2) RETURNING id',
          [body.sku, body.ref],
        );
        return { id: rows[0].id };
      }),
      pool.query<{ available: number }>(read, [body.sku]).then((result) => result.rows),
    ]);
    return this.phases.finish(async () => ({
      reservation: reservation.id,
      available: stock[0].available,
    }));
  }

  @Post('reserve')
  @Idempotent()
  viaView(@Body() body: ReserveBody) {
    return this.reserve(body, VIEW_READ);
  }

  @Post('reserve-cte')
  @Idempotent()
  viaCte(@Body() body: ReserveBody) {
    return this.reserve(body, CTE_READ);
  }

  @Post('reserve-plain-read')
  @Idempotent()
  plainRead(@Body() body: ReserveBody) {
    return this.reserve(body, PLAIN_READ);
  }
}

@Module({
  imports: [IdempotencyModule.forRootAsync({ useFactory: () => ({ globalKeys: true, pool }) })],
  controllers: [ReserveController],
})
class ReserveModule {}

describe('adversary 51b: a read of a view beside a running phase', () => {
  let fixture: PoolApp;
  beforeAll(async () => {
    fixture = await startPoolApp('adv51b_view_beside', {
      module: ReserveModule,
      max: 6,
      usePool: (started) => (pool = started),
      setup: async (admin) => {
        await admin.query('CREATE TABLE stock (sku text PRIMARY KEY, on_hand int NOT NULL)');
        await admin.query("INSERT INTO stock VALUES ('A', 7)");
        await admin.query(
          'CREATE VIEW stock_levels AS SELECT sku, on_hand AS available FROM stock',
        );
        await admin.query(
          'CREATE TABLE reservations (id serial PRIMARY KEY, sku text NOT NULL, ref text NOT NULL)',
        );
      },
    });
  }, 60_000);
  afterAll(async () => fixture?.close(), 60_000);

  const post = (path: string, ref: string) =>
    request(fixture.app.getHttpServer())
      .post(path)
      .set('Idempotency-Key', ref)
      .send({ sku: 'A', ref })
      .then((res) => ({
        status: res.status,
        body: res.body as unknown,
        replayed: res.headers['idempotent-replayed'],
      }));
  const reservations = async (ref: string) =>
    Number(
      (await fixture.admin.query('SELECT count(*) AS n FROM reservations WHERE ref = $1', [ref]))
        .rows[0].n,
    );

  const reservesOnce = async (path: string, ref: string) => {
    const first = await post(path, ref);
    expect({ status: first.status, body: first.body }).toEqual({
      status: 201,
      body: { reservation: expect.any(Number), available: 7 },
    });
    const again = await post(path, ref);
    expect(again).toEqual({ ...first, replayed: 'true' });
    expect(await reservations(ref)).toBe(1);
  };

  /**
   * Stated, not changed (round 51b): a read that cannot be shown to be a plain read of a table
   * (a view may reach the app's code; a WITH that writes) would begin the request's
   * transaction, so beside a running phase it is refused like a write: at once, 500
   * `statement_beside_phase`, nothing stored; the words say "a statement … (a write, or a read
   * that would begin the request's transaction)", and phases.md rule 9 says to read such
   * things inside the phase or after it. Never a hang, never the reservation twice.
   */
  const refusedAtOnce = async (path: string, ref: string) => {
    const first = await post(path, ref);
    expect(first.status).toBe(500);
    expect(first.body).toMatchObject({ code: 'statement_beside_phase' });
    expect((first.body as { detail: string }).detail).toContain(
      "a read that would begin the request's transaction",
    );
    expect(await reservations(ref)).toBeLessThanOrEqual(1);
  };

  it('a read of a view beside the phase: refused at once (stated), the reservation at most once', async () => {
    await refusedAtOnce('/reserve', 'view-1');
  });

  // Since round 75 a WITH of reads is a plain read (`isPlainRead`): it runs apart, as the
  // same read without the WITH does.
  it('a WITH read beside the phase: a plain read, 201, once', async () => {
    await reservesOnce('/reserve-cte', 'cte-1');
  });

  it('control: a plain read of the table beside the phase: 201, once', async () => {
    await reservesOnce('/reserve-plain-read', 'plain-1');
  });
});
