/**
 * Adversary 85 (orm): two query runners with transactions open at once (a booking and an audit
 * unit, as two services interleave them): a savepoint the booking's code sets by hand while
 * the audit's transaction is open is, on the request's one connection, set inside the audit's
 * savepoint; the audit's ordinary `commitTransaction()` (TypeORM's `RELEASE SAVEPOINT`) then
 * destroys it, and the booking's `ROLLBACK TO SAVEPOINT step` fails with `savepoint "step" does
 * not exist`: 500 on every try, where without the library (two connections) it commits.
 *
 *   const booking = dataSource.createQueryRunner();
 *   await booking.startTransaction();
 *   const audit = dataSource.createQueryRunner();
 *   await audit.startTransaction();                          // the audit's unit, open meanwhile
 *   await audit.manager.save(Order, { tag: 'audit' });
 *   await booking.query('SAVEPOINT step');                   // the booking's step
 *   await booking.manager.save(Order, { tag: 'tentative' });
 *   await audit.commitTransaction();                         // the audit done
 *   await booking.query('ROLLBACK TO SAVEPOINT step');       // the step given up: 3B001 here
 *   await booking.manager.save(Order, { tag: 'final' });
 *   await booking.commitTransaction();
 *
 * Code path: lib/data-layers/lazy-transaction.ts `judge` → `nested.markBeside(from, text)`
 * treats the booking's `SAVEPOINT step` as a statement beside the audit's open transaction,
 * "kept if it commits"; `commitFrom` → TypeORM's `RELEASE SAVEPOINT typeorm_1` (renamed by
 * `typeormSavepointAsWithout`) releases every savepoint set after it, `step` too
 * (lib/data-layers/after-request-commit.ts `nestedEnded` even drops its mark: `inside <=
 * depthNow`), and nothing tells the booking's code or refuses anything until PostgreSQL does.
 *
 * Docs: docs/guides/transactions.md "A statement sent beside an open `dataSource.transaction()`
 * … runs inside that nested transaction: kept if it commits"; "What cannot be kept apart there
 * is refused, and the request rolls back (500), rather than differ in silence" (here it is not
 * refused: it fails later with PostgreSQL's error); `ROLLBACK TO SAVEPOINT` of a savepoint of
 * its own is named as supported.
 *
 * Severity: medium (a request that works without the library answers 500 on every retry; no
 * effect is doubled or lost: the whole request rolls back).
 *
 * Failed (round 85): @Idempotent(): 500, no row (the handler's QueryFailedError `savepoint "step" does
 * not exist`); without the library: 201, rows ['c1-audit', 'c1-final'].
 *
 * Suggested fix: a savepoint of one code's own set inside another code's open transaction
 * cannot outlive that transaction's RELEASE on the one connection: refuse the `SAVEPOINT`
 * itself when it is sent beside another's open nested transaction (as a setting beside one is
 * refused, `StatementBesideNestedTransactionError`), with a message saying to set it before
 * the other transaction starts or after it ends; or, at the other's commit, release its
 * savepoint only when no savepoint of other code lives inside it (put the RELEASE off as a
 * put-off commit is).
 *
 * Changed (fixer): the expectation was "201 as without the library"; it is now the clear
 * refusal at the `SAVEPOINT step` itself (500, no row, `SavepointAcrossRunnersError` naming
 * the cause and what to do). Under the library the savepoint can only be set inside the
 * audit's, whose RELEASE must end it, and the audit's commit cannot be put off past the
 * booking's own commit that comes after it; it failed before at the later ROLLBACK TO with
 * PostgreSQL's `savepoint "step" does not exist`, which named neither.
 * Fixed: lib/data-layers/runner-savepoints.ts `RunnerSavepoints.refusalOf`
 * ('set-inside-other'), judged in lazy-transaction.ts `judge` (commit "typeorm: refuse a
 * hand-written savepoint statement that reaches another query runner's"); documented in
 * docs/guides/transactions.md.
 */
import { Body, Controller, type INestApplication, Injectable, Post } from '@nestjs/common';
import { InjectDataSource, TypeOrmModule } from '@nestjs/typeorm';
import request from 'supertest';
import { Column, DataSource, Entity, PrimaryGeneratedColumn } from 'typeorm';
import { Idempotent } from '../../../lib/index.js';
import { startTypeormApp, type TypeormApp } from '../../support/typeorm-app.js';

@Entity({ name: 'adv85_step_orders', synchronize: false })
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
      await audit.startTransaction();
      await audit.manager.save(Order, { tag: `${tag}-audit` });
      await booking.query('SAVEPOINT step');
      await booking.manager.save(Order, { tag: `${tag}-tentative` });
      await audit.commitTransaction();
      await booking.query('ROLLBACK TO SAVEPOINT step'); // the step given up
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

describe('adversary 85 orm: another runner’s commit releases a savepoint the code set by hand meanwhile', () => {
  let fixture: TypeormApp;
  let app: INestApplication;

  beforeAll(async () => {
    fixture = await startTypeormApp('adv85_orm_other_commit_step', {
      controllers: [BookingController],
      providers: [BookingService],
      entities: [Order],
      imports: [TypeOrmModule.forFeature([Order])],
      max: 6,
      idempotency: { globalKeys: true, databaseTimeoutMs: 1500 },
      setup: async (admin) => {
        await admin.query(
          'CREATE TABLE adv85_step_orders (id serial PRIMARY KEY, tag text NOT NULL)',
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
      'SELECT tag FROM adv85_step_orders WHERE tag LIKE $1 ORDER BY id',
      [`${tag}-%`],
    );
    return { status: answer.status, rows: rows.map((row) => row.tag) };
  }

  it('control: without the library (no @Idempotent()), two connections: 201, the audit and the final row', async () => {
    expect(await scenario('plain', 'c1')).toEqual({ status: 201, rows: ['c1-audit', 'c1-final'] });
  }, 30_000);

  it('with @Idempotent(), the booking’s SAVEPOINT inside the audit’s open transaction is refused at once, clearly (Changed (fixer))', async () => {
    refusals.length = 0;
    expect(await scenario('idem', 'i1')).toEqual({ status: 500, rows: [] });
    expect(refusals).toEqual(['SavepointAcrossRunnersError']);
  }, 30_000);
});
