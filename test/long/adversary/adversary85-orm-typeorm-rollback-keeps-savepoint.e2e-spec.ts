/**
 * Adversary 85 (orm): TypeORM's nested `rollbackTransaction()` sends `ROLLBACK TO SAVEPOINT
 * typeorm_N` and never releases it: the savepoint stays on the connection, as PostgreSQL's
 * ROLLBACK TO keeps it. Round 83's savepoint marks drop it at that rollback
 * (`AfterRequestCommit.nestedEnded`: `mark.inside <= depthNow`), so a later `ROLLBACK TO
 * SAVEPOINT typeorm_1` by name (the docs' own example, which since round 83 reaches the name
 * TypeORM gives) that lands on it, past a nested commit made after it, finds no mark: that
 * commit's work is undone by PostgreSQL, yet `afterTransactionCommit` is told of it after the
 * request's COMMIT.
 *
 *   await qr.startTransaction();                      // the booking
 *   await qr.startTransaction();                      // try 1: typeorm_1
 *   await qr.manager.save(Order, { tag: 'try1' });
 *   await qr.rollbackTransaction();                   // ROLLBACK TO SAVEPOINT typeorm_1 (kept)
 *   await qr.startTransaction();                      // try 2: typeorm_1 again
 *   await qr.manager.save(Order, { tag: 'try2' });
 *   await qr.commitTransaction();                     // RELEASE typeorm_1: the second one
 *   await qr.query('ROLLBACK TO SAVEPOINT typeorm_1'); // back to before try 1: try 2 undone
 *   await qr.manager.save(Order, { tag: 'final' });
 *   await qr.commitTransaction();
 *
 * Code path: lib/data-layers/after-request-commit.ts `savepointMarksAfter` keeps the mark at a
 * ROLLBACK TO (`marks.slice(0, at + 1)`), but `nestedEnded(depthNow, 'rolled-back')`, called
 * from lib/data-layers/lazy-transaction.ts `rollbackFrom`, filters it out (`inside <=
 * depthNow`), while PostgreSQL keeps it; the by-hand `ROLLBACK TO SAVEPOINT typeorm_1` then
 * hits `at < 0` ("a name none was set under … changes nothing") and the noted commit of try 2
 * stays, told by `tell`.
 *
 * Docs: docs/guides/transactions.md: "code that rolls back to one by its name
 * (`qr.query('ROLLBACK TO SAVEPOINT typeorm_1')`) reaches the one it means"; `afterTransactionCommit`
 * "never for a nested commit that an enclosing transaction of its code then rolled back (its
 * `ROLLBACK TO` undid that commit's work too)".
 *
 * Severity: low-medium (a wrong event told for work PostgreSQL undid; rows and answer right;
 * needs a by-name rollback to TypeORM's savepoint after a nested retry).
 *
 * Failed (round 85): 201, rows ['x1-final'], told ['x1-try2', 'x1-outer'].
 * Control: the same without try 1 (no stale savepoint): rows ['c1-final'], told ['c1-outer'].
 *
 * Suggested fix: at a TypeORM nested rollback keep the mark of the savepoint it rolled back
 * to (PostgreSQL keeps it: only the ones set after it end), dropping only those set inside
 * it; at a RELEASE drop the latest of that name, as `savepointMarksAfter` already does.
 *
 * Fixed: lib/data-layers/after-request-commit.ts `marksAfterNestedEnd` (from `nestedEnded`):
 * a TypeORM savepoint mark of the ended depth that its RELEASE did not end stays (the one
 * rolled back to, or an older one a rollback left), now holding what is done after it at
 * the depth it was set at (commit "typeorm: savepoint marks once the statement ran").
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

@Entity({ name: 'adv85_stale_orders', synchronize: false })
class Order {
  @PrimaryGeneratedColumn()
  id!: number;

  @Column({ type: 'text' })
  tag!: string;
}

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

  async book(tag: string, firstTry: boolean) {
    const qr = this.dataSource.createQueryRunner();
    try {
      await qr.startTransaction();
      qr.data = { tag: `${tag}-outer` };
      if (firstTry) {
        await qr.startTransaction();
        qr.data = { tag: `${tag}-try1` };
        await qr.manager.save(Order, { tag: `${tag}-try1` });
        await qr.rollbackTransaction();
      } else {
        await qr.query('SAVEPOINT typeorm_1'); // where try 1 would have set it
      }
      await qr.startTransaction();
      qr.data = { tag: `${tag}-try2` };
      await qr.manager.save(Order, { tag: `${tag}-try2` });
      await qr.commitTransaction();
      qr.data = { tag: `${tag}-outer` };
      await qr.query('ROLLBACK TO SAVEPOINT typeorm_1'); // back to before try 1
      await qr.manager.save(Order, { tag: `${tag}-final` });
      await qr.commitTransaction();
      return { tag };
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
  book(@Body() body: { tag: string; firstTry: boolean }) {
    return this.bookings.book(body.tag, body.firstTry);
  }
}

describe('adversary 85 orm: TypeORM’s rolled-back savepoint, kept by PostgreSQL, is dropped from the marks', () => {
  let fixture: TypeormApp;
  let app: INestApplication;

  beforeAll(async () => {
    fixture = await startTypeormApp('adv85_orm_stale_savepoint', {
      controllers: [BookingController],
      providers: [BookingService],
      entities: [Order],
      subscribers: [RelaySubscriber],
      imports: [TypeOrmModule.forFeature([Order])],
      max: 6,
      idempotency: { globalKeys: true, databaseTimeoutMs: 1500 },
      setup: async (admin) => {
        await admin.query(
          'CREATE TABLE adv85_stale_orders (id serial PRIMARY KEY, tag text NOT NULL)',
        );
      },
    });
    ({ app } = fixture);
  }, 60_000);

  afterAll(async () => {
    await fixture?.close();
  });

  async function scenario(tag: string, firstTry: boolean) {
    told.length = 0;
    const answer = await request(app.getHttpServer())
      .post('/book')
      .set('Idempotency-Key', `key-${tag}`)
      .send({ tag, firstTry });
    const { rows } = await fixture.admin.query<{ tag: string }>(
      'SELECT tag FROM adv85_stale_orders WHERE tag LIKE $1 ORDER BY id',
      [`${tag}-%`],
    );
    return { status: answer.status, rows: rows.map((row) => row.tag), told: [...told] };
  }

  it('control: the savepoint set by the code itself: try 2 undone, only the outer commit told', async () => {
    expect(await scenario('c1', false)).toEqual({
      status: 201,
      rows: ['c1-final'],
      told: ['c1-outer'],
    });
  }, 30_000);

  it('the savepoint TypeORM’s rollback of try 1 left: try 2 undone, never told', async () => {
    expect(await scenario('x1', true)).toEqual({
      status: 201,
      rows: ['x1-final'],
      told: ['x1-outer'],
    });
  }, 30_000);
});
