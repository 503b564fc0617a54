/**
 * Adversary 83 (orm): round 82's fix (`noteAfterEnd`) drops a noted nested commit only when a
 * TypeORM `rollbackTransaction()` rolls back a savepoint around it. A `ROLLBACK TO SAVEPOINT`
 * of the code's own savepoint (raw SQL, which the library lets through: transactions.md names
 * "`ROLLBACK TO SAVEPOINT` of a savepoint of its own") undoes the nested commit's work just the
 * same, yet its `afterTransactionCommit` is still told after the request's COMMIT: the
 * subscriber hears "committed" for a row that does not exist.
 *
 *   @EventSubscriber() class Relay { afterTransactionCommit(e) { mail(e.queryRunner.data.tag) } }
 *
 *   const qr = dataSource.createQueryRunner();
 *   await qr.startTransaction();                          // the booking
 *   await qr.manager.save(Order, { tag: 'outer' });
 *   await qr.query('SAVEPOINT attempt');                  // a step that may be given up alone
 *   await qr.startTransaction();                          // the step's own unit (a service's)
 *   await qr.manager.save(Order, { tag: 'inner' });
 *   await qr.commitTransaction();
 *   await qr.query('ROLLBACK TO SAVEPOINT attempt');      // the step undone
 *   await qr.commitTransaction();                         // the booking kept
 *
 * Code path: lib/data-layers/lazy-transaction.ts:458 notes the inner commit at its RELEASE
 * (into the depth of the outer transaction); lib/data-layers/after-request-commit.ts:96
 * `nestedEnded` is called only from TypeORM's commit/rollback events, never for the code's own
 * `ROLLBACK TO SAVEPOINT` (lib/transaction/sql/sql-text.ts `rollsBackToSavepoint` reads it, for
 * session state only); the outer commit moves the note to depth 1 and `tell` broadcasts it.
 *
 * Docs: docs/guides/transactions.md "`afterTransactionCommit`: ... never for a nested commit
 * that an enclosing transaction of its code then rolled back (its `ROLLBACK TO` undid that
 * commit's work too)"; "TypeORM's transaction events mean what they say".
 *
 * Severity: medium (a side effect promised only for durable work, a mail or a counter, runs
 * for work that was rolled back; the same harm as adversary 82's, through the code's own
 * savepoint instead of TypeORM's).
 *
 * Failed before the fix: 201, rows ['r1-outer'], but told ['r1-inner', 'r1-outer'].
 * Control: RELEASE SAVEPOINT instead: both rows, told of both.
 *
 * Fixed: the savepoints on the request's connection are tracked by name, its code's own and
 * TypeORM's (`LazyTransaction.judge` feeds each savepoint statement to
 * `AfterRequestCommit.savepointSent`): a `ROLLBACK TO SAVEPOINT s` drops the nested commits
 * noted since `s` was set whose work lives inside it, a `RELEASE` keeps them, and a savepoint
 * ends with the nested transaction it was set in (`savepointMarksAfter`, `undoneBy`, with a
 * table-driven spec in lib/data-layers/after-request-commit.spec.ts; commit 9d94ebe).
 *
 * Suggested fix: note the code's own savepoints (SAVEPOINT / RELEASE / ROLLBACK TO by name,
 * `savepointControlsOf`) on the same depth stack as TypeORM's: a `SAVEPOINT s` opens a level,
 * and a `ROLLBACK TO SAVEPOINT s` drops every note made inside `s` since it was set (notes
 * taken after the savepoint's position, not only those deeper by TypeORM's depth).
 */
import { Body, Controller, type INestApplication, Injectable, Post } from '@nestjs/common';
import { InjectDataSource, TypeOrmModule } from '@nestjs/typeorm';
import request from 'supertest';
import {
  Column,
  DataSource,
  Entity,
  type EntitySubscriberInterface,
  EventSubscriber,
  PrimaryGeneratedColumn,
  type TransactionCommitEvent,
} from 'typeorm';
import { Idempotent } from '../../../lib/index.js';
import { startTypeormApp, type TypeormApp } from '../../support/typeorm-app.js';

@Entity({ name: 'adv83_told_orders', synchronize: false })
class Order {
  @PrimaryGeneratedColumn()
  id!: number;

  @Column({ type: 'text' })
  tag!: string;
}

/** What the subscriber was told committed (a mail sent, in the app). */
const told: string[] = [];

@EventSubscriber()
class RelaySubscriber implements EntitySubscriberInterface {
  afterTransactionCommit(event: TransactionCommitEvent) {
    const tag = (event.queryRunner.data as { tag?: string } | undefined)?.tag;
    if (tag) told.push(tag);
  }
}

@Injectable()
class BookingService {
  constructor(@InjectDataSource() private readonly dataSource: DataSource) {}

  async book(tag: string, giveUp: boolean) {
    const qr = this.dataSource.createQueryRunner();
    try {
      await qr.startTransaction();
      qr.data = { tag: `${tag}-outer` };
      await qr.manager.save(Order, { tag: `${tag}-outer` });
      await qr.query('SAVEPOINT attempt'); // the step may be given up on its own
      await qr.startTransaction();
      qr.data = { tag: `${tag}-inner` };
      await qr.manager.save(Order, { tag: `${tag}-inner` });
      await qr.commitTransaction();
      qr.data = { tag: `${tag}-outer` };
      if (giveUp)
        await qr.query('ROLLBACK TO SAVEPOINT attempt'); // the step undone
      else await qr.query('RELEASE SAVEPOINT attempt');
      await qr.commitTransaction();
      return { tag, booked: !giveUp };
    } finally {
      await qr.release();
    }
  }
}

@Controller()
class BookingController {
  constructor(private readonly bookings: BookingService) {}

  @Post('book')
  @Idempotent()
  book(@Body() body: { tag: string; giveUp: boolean }) {
    return this.bookings.book(body.tag, body.giveUp);
  }
}

describe('adversary 83 orm: afterTransactionCommit told of a nested commit its own savepoint rolled back', () => {
  let fixture: TypeormApp;
  let app: INestApplication;

  beforeAll(async () => {
    fixture = await startTypeormApp('adv83_orm_own_savepoint_told', {
      controllers: [BookingController],
      providers: [BookingService],
      entities: [Order],
      subscribers: [RelaySubscriber],
      imports: [TypeOrmModule.forFeature([Order])],
      max: 6,
      idempotency: { globalKeys: true, databaseTimeoutMs: 1500 },
      setup: async (admin) => {
        await admin.query(
          'CREATE TABLE adv83_told_orders (id serial PRIMARY KEY, tag text NOT NULL)',
        );
      },
    });
    ({ app } = fixture);
  }, 60_000);

  afterAll(async () => {
    await fixture?.close();
  });

  async function scenario(tag: string, giveUp: boolean) {
    told.length = 0;
    const answer = await request(app.getHttpServer())
      .post('/book')
      .set('Idempotency-Key', `key-${tag}`)
      .send({ tag, giveUp });
    const { rows } = await fixture.admin.query<{ tag: string }>(
      'SELECT tag FROM adv83_told_orders WHERE tag LIKE $1 ORDER BY id',
      [`${tag}-%`],
    );
    return { status: answer.status, rows: rows.map((row) => row.tag), told: [...told] };
  }

  it('control: the step kept (RELEASE SAVEPOINT): both rows, the subscriber told of both, in commit order', async () => {
    expect(await scenario('c1', false)).toEqual({
      status: 201,
      rows: ['c1-outer', 'c1-inner'],
      told: ['c1-inner', 'c1-outer'],
    });
  }, 30_000);

  it('a nested commit undone by ROLLBACK TO SAVEPOINT of its code is never told committed', async () => {
    expect(await scenario('r1', true)).toEqual({
      status: 201,
      rows: ['r1-outer'],
      told: ['r1-outer'],
    });
  }, 30_000);
});
