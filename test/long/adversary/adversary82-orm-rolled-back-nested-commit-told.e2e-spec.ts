/**
 * Adversary 82 (orm): an `afterTransactionCommit` subscriber is told, after the request's
 * COMMIT, of a nested commit whose work was rolled back: the nested transaction committed into
 * an enclosing one of its code that then rolled back (its `ROLLBACK TO SAVEPOINT` undid the
 * inner's release too). The request commits (its handler caught the outer failure and
 * answered), and the subscriber hears "committed" for rows that do not exist: an "order
 * confirmed" mail, a counter on another connection, a cache warmed for a rolled-back order.
 *
 *   @EventSubscriber() class Relay { afterTransactionCommit(e) { mail(e.queryRunner.data.tag) } }
 *
 *   const qr = dataSource.createQueryRunner();
 *   await qr.startTransaction();                        // the booking
 *   await qr.manager.save(Order, { tag: 'outer' });
 *   await qr.startTransaction();                        // a step of it (a service's own unit)
 *   qr.data = { tag: 'inner' };
 *   await qr.manager.save(Order, { tag: 'inner' });
 *   await qr.commitTransaction();                       // the step done
 *   await qr.rollbackTransaction();                     // the booking given up (caught, 201)
 *
 * Code path: lib/data-layers/lazy-transaction.ts:458 notes the nested commit's
 * `afterTransactionCommit` (`this.afterCommit.note(owner)`) at its RELEASE; nothing takes it
 * off the books when an enclosing savepoint of the same code is rolled back to;
 * lib/data-layers/after-request-commit.ts `tell` then broadcasts every noted commit once the
 * request committed (`LazyTransaction.commitWith` -> `tellCommitted`).
 *
 * Docs: docs/guides/transactions.md "TypeORM's transaction events mean what they say ... only
 * the request's COMMIT makes anything durable ... `afterTransactionCommit`: once the request's
 * COMMIT succeeded ... Never if the request rolled back"; lazy-transaction.ts's own intent:
 * an `afterTransactionCommit` is "never [told] inside the other's savepoint, which may still
 * roll back (adversary 80b)". Here the savepoint did roll back, and it is told anyway.
 *
 * Severity: medium (a side effect promised only for durable work runs for rolled-back work:
 * the mail or the counter of an order that does not exist; without the library TypeORM says it
 * at the RELEASE, but the library's point is to say it only once it is durable).
 *
 * Fails now: 201, no `adv82_told_orders` row, and the subscriber was told `['r1-inner']`.
 * Control: both commits kept: 201, both rows, told `['c1-inner', 'c1-outer']`.
 *
 * Suggested fix: note each nested commit with the savepoint depth (and the stack entry) it was
 * released into; on a `ROLLBACK TO SAVEPOINT` of depth d (and on the request's rollback), drop
 * the notes of commits released into a savepoint at depth >= d that is being rolled back.
 *
 * Fixed: each noted commit keeps the depth its work lives at (the runner's depth after its
 * RELEASE; a put-off one's, the depth around its savepoint); a RELEASE moves it out with its
 * enclosing savepoint, a ROLLBACK TO drops those deeper than the depth it leaves
 * (`noteAfterEnd`, lib/data-layers/after-request-commit.ts; lazy-transaction.ts's commit and
 * rollback).
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

@Entity({ name: 'adv82_told_orders', synchronize: false })
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
      await qr.startTransaction();
      qr.data = { tag: `${tag}-inner` };
      await qr.manager.save(Order, { tag: `${tag}-inner` });
      await qr.commitTransaction();
      qr.data = { tag: `${tag}-outer` };
      if (giveUp) {
        await qr.rollbackTransaction();
        return { tag, booked: false };
      }
      await qr.commitTransaction();
      return { tag, booked: true };
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

describe('adversary 82 orm: afterTransactionCommit told of a nested commit rolled back with its enclosing one', () => {
  let fixture: TypeormApp;
  let app: INestApplication;

  beforeAll(async () => {
    fixture = await startTypeormApp('adv82_orm_told_rolled_back', {
      controllers: [BookingController],
      providers: [BookingService],
      entities: [Order],
      subscribers: [RelaySubscriber],
      imports: [TypeOrmModule.forFeature([Order])],
      max: 6,
      idempotency: { globalKeys: true, databaseTimeoutMs: 1500 },
      setup: async (admin) => {
        await admin.query(
          'CREATE TABLE adv82_told_orders (id serial PRIMARY KEY, tag text NOT NULL)',
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
      'SELECT tag FROM adv82_told_orders WHERE tag LIKE $1 ORDER BY id',
      [`${tag}-%`],
    );
    return { status: answer.status, rows: rows.map((row) => row.tag), told: [...told] };
  }

  it('control: both commits kept: both rows, the subscriber told of both, in commit order', async () => {
    expect(await scenario('c1', false)).toEqual({
      status: 201,
      rows: ['c1-outer', 'c1-inner'],
      told: ['c1-inner', 'c1-outer'],
    });
  }, 30_000);

  it('a nested commit rolled back with its enclosing transaction is never told committed', async () => {
    expect(await scenario('r1', true)).toEqual({ status: 201, rows: [], told: [] });
  }, 30_000);
});
