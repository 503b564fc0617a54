/**
 * Adversary 85 (orm): a `ROLLBACK TO SAVEPOINT` of the code's own savepoint (raw SQL through
 * its query runner, which the library lets through and tracks since round 83) silently undoes
 * work that, without the library, another query runner committed on a connection of its own:
 * an audit row written with `dataSource.transaction()` (or a plain `dataSource.manager.save()`)
 * while the first runner's transaction was open. Under the library both are savepoints on the
 * request's one connection, the audit's released inside the first code's `step`; the ROLLBACK
 * TO takes it along. The request answers 201, the stored answer replays, and the audit is gone
 * for good. TypeORM's own `rollbackTransaction()` of the same transaction is refused in that
 * case (500 `transaction_aborted`, "as without the library" or not at all); the code's own
 * ROLLBACK TO is not.
 *
 *   const qr = dataSource.createQueryRunner();
 *   await qr.startTransaction();                                   // the booking
 *   await qr.query('SAVEPOINT step');                              // a step that may be given up
 *   await qr.manager.save(Order, { tag: 'tentative' });
 *   await dataSource.transaction((em) => em.save(Order, { tag: 'audit' }));  // the audit: kept whatever happens
 *   await qr.query('ROLLBACK TO SAVEPOINT step');                  // the step given up
 *   await qr.manager.save(Order, { tag: 'final' });
 *   await qr.commitTransaction();
 *
 * Code path: lib/data-layers/lazy-transaction.ts `judge` lets `ROLLBACK TO SAVEPOINT step`
 * through (only `AfterRequestCommit.savepointSent` reads it, for `afterTransactionCommit`); the
 * checks that refuse a rollback taking along what ran beside it (`rollbackFrom` →
 * `nested.ending(from, 'rollback')`, `StatementBesideNestedTransactionError`; and the 500 that
 * TypeORM's `rollbackTransaction()` gets here) are only on TypeORM's rollback path, never on
 * the code's own savepoint statements (lib/data-layers/nested-identity.ts reads those for
 * settings only).
 *
 * Docs: docs/guides/transactions.md "A statement sent beside an open `dataSource.transaction()`
 * ... runs inside that nested transaction: kept if it commits; if it rolls back it would take
 * the statement along, where without the library it commits on its own connection, so that
 * rollback is refused"; "What cannot be kept apart there is refused, and the request rolls
 * back (500), rather than differ in silence"; `ROLLBACK TO SAVEPOINT` of a savepoint of its own
 * is named as supported.
 *
 * Severity: high (an effect lost in silence: a committed audit row is rolled back, the request
 * answers 201 and its replay says so forever).
 *
 * Failed (round 85): @Idempotent(): 201, rows ['i1-final'] (the audit gone), and likewise
 * ['i2-final'] with `dataSource.manager.save()`; without the library: 201, rows
 * ['c1-audit', 'c1-final'].
 *
 * Suggested fix: treat the code's own `ROLLBACK TO SAVEPOINT s` (and a `RELEASE` that would
 * end other code's savepoints) as TypeORM's rollback is treated: find, by the savepoint marks
 * that round 83 keeps, whether anything committed or sent by other code (another view's
 * transaction released, or a statement beside) lives inside `s` since it was set, and refuse
 * it before it is sent (`StatementBesideNestedTransactionError`, 500, rolled back) rather
 * than undo that work in silence.
 *
 * Fixed: lib/data-layers/runner-savepoints.ts `RunnerSavepoints`: a savepoint its code set
 * by hand notes another runner's writes and transactions begun inside it (`workOf`); its
 * `ROLLBACK TO` is then refused before it is sent ('takes-other', `SavepointAcrossRunnersError`:
 * 500, rolled back, a message naming the cause and what to do), judged in lazy-transaction.ts
 * `judge` (commit "typeorm: refuse a hand-written savepoint statement that reaches another
 * query runner's"); documented in docs/guides/transactions.md.
 * Changed (fixer): the expectation "kept, or refused" is now the refusal, by its error's name
 * (the audit cannot be kept: on the one connection it is inside `step`).
 */
import { Body, Controller, type INestApplication, Injectable, Post } from '@nestjs/common';
import { InjectDataSource, TypeOrmModule } from '@nestjs/typeorm';
import request from 'supertest';
import { Column, DataSource, Entity, PrimaryGeneratedColumn } from 'typeorm';
import { Idempotent } from '../../../lib/index.js';
import { startTypeormApp, type TypeormApp } from '../../support/typeorm-app.js';

@Entity({ name: 'adv85_other_orders', synchronize: false })
class Order {
  @PrimaryGeneratedColumn()
  id!: number;

  @Column({ type: 'text' })
  tag!: string;
}

type Audit = 'transaction' | 'save';

@Injectable()
class BookingService {
  constructor(@InjectDataSource() private readonly dataSource: DataSource) {}

  async book(tag: string, audit: Audit) {
    const qr = this.dataSource.createQueryRunner();
    try {
      await qr.startTransaction();
      await qr.query('SAVEPOINT step');
      await qr.manager.save(Order, { tag: `${tag}-tentative` });
      // The audit: its own unit of work, kept whatever the booking does.
      if (audit === 'transaction') {
        await this.dataSource.transaction((em) => em.save(Order, { tag: `${tag}-audit` }));
      } else {
        await this.dataSource.manager.save(Order, { tag: `${tag}-audit` });
      }
      await qr.query('ROLLBACK TO SAVEPOINT step'); // the step given up
      await qr.manager.save(Order, { tag: `${tag}-final` });
      await qr.commitTransaction();
      return { tag };
    } finally {
      await qr.release();
    }
  }
}

/** The errors the handler's code met (the refusal's name). */
const refusals: string[] = [];

@Controller()
class BookingController {
  constructor(private readonly bookings: BookingService) {}

  @Post('plain')
  plain(@Body() body: { tag: string; audit: Audit }) {
    return this.bookings.book(body.tag, body.audit);
  }

  @Post('idem')
  @Idempotent()
  async idem(@Body() body: { tag: string; audit: Audit }) {
    try {
      return await this.bookings.book(body.tag, body.audit);
    } catch (error) {
      refusals.push((error as Error).name);
      throw error;
    }
  }
}

describe('adversary 85 orm: the code’s own ROLLBACK TO SAVEPOINT undoes another runner’s committed work in silence', () => {
  let fixture: TypeormApp;
  let app: INestApplication;

  beforeAll(async () => {
    fixture = await startTypeormApp('adv85_orm_own_rollback_other', {
      controllers: [BookingController],
      providers: [BookingService],
      entities: [Order],
      imports: [TypeOrmModule.forFeature([Order])],
      max: 6,
      idempotency: { globalKeys: true, databaseTimeoutMs: 1500 },
      setup: async (admin) => {
        await admin.query(
          'CREATE TABLE adv85_other_orders (id serial PRIMARY KEY, tag text NOT NULL)',
        );
      },
    });
    ({ app } = fixture);
  }, 60_000);

  afterAll(async () => {
    await fixture?.close();
  });

  async function scenario(route: 'plain' | 'idem', tag: string, audit: Audit) {
    const answer = await request(app.getHttpServer())
      .post(`/${route}`)
      .set('Idempotency-Key', `key-${tag}`)
      .send({ tag, audit });
    const { rows } = await fixture.admin.query<{ tag: string }>(
      'SELECT tag FROM adv85_other_orders WHERE tag LIKE $1 ORDER BY id',
      [`${tag}-%`],
    );
    return { status: answer.status, rows: rows.map((row) => row.tag) };
  }

  it('control: without the library (no @Idempotent()), the audit committed on its own: both rows', async () => {
    expect(await scenario('plain', 'c1', 'transaction')).toEqual({
      status: 201,
      rows: ['c1-audit', 'c1-final'],
    });
    expect(await scenario('plain', 'c2', 'save')).toEqual({
      status: 201,
      rows: ['c2-audit', 'c2-final'],
    });
  }, 30_000);

  it('with @Idempotent(), a dataSource.transaction() audit is never undone in silence: the other code’s ROLLBACK TO is refused, clearly (Changed (fixer))', async () => {
    refusals.length = 0;
    // Refused (500, nothing kept, the retry may run it again): never 201 without the audit.
    expect(await scenario('idem', 'i1', 'transaction')).toEqual({ status: 500, rows: [] });
    expect(refusals).toEqual(['SavepointAcrossRunnersError']);
  }, 30_000);

  it('with @Idempotent(), a dataSource.manager.save() audit is never undone in silence: the ROLLBACK TO is refused, clearly (Changed (fixer))', async () => {
    refusals.length = 0;
    expect(await scenario('idem', 'i2', 'save')).toEqual({ status: 500, rows: [] });
    expect(refusals).toEqual(['SavepointAcrossRunnersError']);
  }, 30_000);
});
