/**
 * Adversary 85 (orm): two query runners with transactions open at once (two services whose
 * awaits interleave, each with the same `withSavepoint('sp', …)` helper: a fixed savepoint
 * name, as most such helpers have). Without the library each runner has its own connection and
 * its own `sp`. Under the library both are savepoints on the request's one connection, and a
 * name is PostgreSQL's latest of that name there: the booking's `ROLLBACK TO SAVEPOINT sp`
 * reaches the audit's `sp`, set after it. The booking's given-up write (a tentative charge) is
 * NOT undone and commits with the request; the audit's write after its own `sp` is undone
 * instead. 201, the stored answer replays it: one effect the code rolled back made durable,
 * one it committed lost.
 *
 *   // booking service                            // audit service, interleaved
 *   await booking.startTransaction();
 *   await booking.query('SAVEPOINT sp');
 *   await booking.manager.save(Order, { tag: 'tentative' });
 *                                                  await audit.startTransaction();
 *                                                  await audit.query('SAVEPOINT sp');
 *                                                  await audit.manager.save(Order, { tag: 'audit' });
 *   await booking.query('ROLLBACK TO SAVEPOINT sp');  // the step given up
 *                                                  await audit.query('RELEASE SAVEPOINT sp');
 *                                                  await audit.commitTransaction();
 *   await booking.manager.save(Order, { tag: 'final' });
 *   await booking.commitTransaction();
 *
 * Code path: lib/data-layers/lazy-transaction.ts `judge` lets the code's own savepoint
 * statements through on the one connection, noting them only for `afterTransactionCommit`
 * (`AfterRequestCommit.savepointSent`, whose `savepointMarksAfter` even reads the ROLLBACK TO
 * as reaching the audit's `sp`, by `lastIndexOf`): nothing ties a savepoint to the view that
 * set it, or refuses a savepoint statement of one view that reaches another view's savepoint.
 * (The docs note that TypeORM's `typeorm_N` names are shared across runners open at once;
 * the code's own names are not mentioned.)
 *
 * Docs: docs/guides/transactions.md "What cannot be kept apart there is refused, and the
 * request rolls back (500), rather than differ in silence"; `ROLLBACK TO SAVEPOINT` of "a
 * savepoint of its own" named as supported; "Two nested transactions at once …: their
 * savepoints are one stack".
 *
 * Severity: high (in silence: a write its code rolled back is committed and a write its code
 * committed is lost; the answer 201 is stored and replayed).
 *
 * Failed (round 85): @Idempotent(): 201, rows ['i1-tentative', 'i1-final'] (the audit lost, the
 * tentative kept); without the library: 201, rows ['c1-audit', 'c1-final'].
 *
 * Suggested fix: name each view's own savepoints apart on the wire (a view's `SAVEPOINT sp`
 * sent as a name of the library's, unique per view, and its RELEASE / ROLLBACK TO mapped to
 * the view's latest of that name), as round 83 renamed TypeORM's; or refuse (500, rolled
 * back) a savepoint statement of one view while another view's transaction or savepoint is
 * open after the one it names.
 *
 * Fixed: lib/data-layers/runner-savepoints.ts `RunnerSavepoints` keeps the savepoints its
 * code sets by hand by query runner, as one stack; a `RELEASE` / `ROLLBACK TO` whose name is
 * on the connection another runner's latest is refused before it is sent ('reaches-other',
 * `SavepointAcrossRunnersError`: 500, rolled back), judged in lazy-transaction.ts `judge`
 * (commit "typeorm: refuse a hand-written savepoint statement that reaches another query
 * runner's"); documented in docs/guides/transactions.md. Renaming each runner's names apart
 * would not do: the booking's `sp` holds the audit's open transaction, which its ROLLBACK TO
 * would take along.
 * Changed (fixer): the expectation "kept, or refused" is now the refusal, by its error's name.
 */
import { Body, Controller, type INestApplication, Injectable, Post } from '@nestjs/common';
import { InjectDataSource, TypeOrmModule } from '@nestjs/typeorm';
import request from 'supertest';
import { Column, DataSource, Entity, PrimaryGeneratedColumn } from 'typeorm';
import { Idempotent } from '../../../lib/index.js';
import { startTypeormApp, type TypeormApp } from '../../support/typeorm-app.js';

@Entity({ name: 'adv85_shared_orders', synchronize: false })
class Order {
  @PrimaryGeneratedColumn()
  id!: number;

  @Column({ type: 'text' })
  tag!: string;
}

@Injectable()
class BookingService {
  constructor(@InjectDataSource() private readonly dataSource: DataSource) {}

  async book(tag: string) {
    const booking = this.dataSource.createQueryRunner();
    const audit = this.dataSource.createQueryRunner();
    try {
      await booking.startTransaction();
      await booking.query('SAVEPOINT sp');
      await booking.manager.save(Order, { tag: `${tag}-tentative` });
      await audit.startTransaction();
      await audit.query('SAVEPOINT sp');
      await audit.manager.save(Order, { tag: `${tag}-audit` });
      await booking.query('ROLLBACK TO SAVEPOINT sp'); // the booking's step given up
      await audit.query('RELEASE SAVEPOINT sp');
      await audit.commitTransaction();
      await booking.manager.save(Order, { tag: `${tag}-final` });
      await booking.commitTransaction();
      return { tag };
    } finally {
      await audit.release();
      await booking.release();
    }
  }
}

/** The errors the handler's code met (the refusal's name). */
const refusals: string[] = [];

@Controller()
class BookingController {
  constructor(private readonly bookings: BookingService) {}

  @Post('plain')
  plain(@Body() body: { tag: string }) {
    return this.bookings.book(body.tag);
  }

  @Post('idem')
  @Idempotent()
  async idem(@Body() body: { tag: string }) {
    try {
      return await this.bookings.book(body.tag);
    } catch (error) {
      refusals.push((error as Error).name);
      throw error;
    }
  }
}

describe('adversary 85 orm: one savepoint name used by two query runners open at once', () => {
  let fixture: TypeormApp;
  let app: INestApplication;

  beforeAll(async () => {
    fixture = await startTypeormApp('adv85_orm_shared_name', {
      controllers: [BookingController],
      providers: [BookingService],
      entities: [Order],
      imports: [TypeOrmModule.forFeature([Order])],
      max: 6,
      idempotency: { globalKeys: true, databaseTimeoutMs: 1500 },
      setup: async (admin) => {
        await admin.query(
          'CREATE TABLE adv85_shared_orders (id serial PRIMARY KEY, tag text NOT NULL)',
        );
      },
    });
    ({ app } = fixture);
  }, 60_000);

  afterAll(async () => {
    await fixture?.close();
  });

  async function scenario(route: 'plain' | 'idem', tag: string) {
    const answer = await request(app.getHttpServer())
      .post(`/${route}`)
      .set('Idempotency-Key', `key-${tag}`)
      .send({ tag });
    const { rows } = await fixture.admin.query<{ tag: string }>(
      'SELECT tag FROM adv85_shared_orders WHERE tag LIKE $1 ORDER BY id',
      [`${tag}-%`],
    );
    return { status: answer.status, rows: rows.map((row) => row.tag) };
  }

  it('control: without the library (no @Idempotent()), each runner its own sp: the tentative undone, the audit kept', async () => {
    expect(await scenario('plain', 'c1')).toEqual({ status: 201, rows: ['c1-audit', 'c1-final'] });
  }, 30_000);

  it('with @Idempotent(), the booking’s ROLLBACK TO sp, whose name is the audit’s latest, is refused at once, clearly (Changed (fixer))', async () => {
    refusals.length = 0;
    expect(await scenario('idem', 'i1')).toEqual({ status: 500, rows: [] });
    expect(refusals).toEqual(['SavepointAcrossRunnersError']);
  }, 30_000);
});
