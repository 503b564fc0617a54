/**
 * Adversary 83 (orm): TypeORM names a nested transaction's savepoint by its depth
 * (`typeorm_${depth - 1}`: the first nested transaction of a runner is `typeorm_1`), and code
 * that reaches for it by name with raw SQL (`qr.query('ROLLBACK TO SAVEPOINT typeorm_1')`,
 * which the library lets through as a savepoint of the app's own) means the first nested one.
 * Under the library the runner's own transaction is itself a savepoint (depth 1 is the
 * request's), so every name is shifted by one: `typeorm_1` is the OUTER transaction's. The
 * rollback undoes the outer transaction's work too, drops `typeorm_2`, and the next
 * `commitTransaction()` fails (`savepoint "typeorm_2" does not exist`): 500, nothing kept.
 * Without the library: 201, the outer row kept, the inner undone.
 *
 *   const qr = dataSource.createQueryRunner();
 *   await qr.startTransaction();                           // BEGIN (here: SAVEPOINT typeorm_1)
 *   await qr.manager.save(Order, { tag: 'outer' });
 *   await qr.startTransaction();                           // SAVEPOINT typeorm_1 (here: _2)
 *   await qr.manager.save(Order, { tag: 'inner' });
 *   await qr.query('ROLLBACK TO SAVEPOINT typeorm_1');     // the step undone, by its name
 *   await qr.commitTransaction();                          // RELEASE SAVEPOINT typeorm_1 (_2)
 *   await qr.commitTransaction();                          // COMMIT (RELEASE typeorm_1)
 *
 * Code path: lib/data-layers/lazy-transaction.ts: the request's transaction counted as the
 * runner's depth 1 (`internals.transactionDepth`), so TypeORM's PostgresQueryRunner names the
 * handler's first `startTransaction()` `typeorm_1`; lib/transaction/request-transaction.ts:1064
 * `refusalOf` lets a savepoint statement of the app's through by any name
 * (`savepointControlsOf`, lib/transaction/sql/sql-text.ts:241), TypeORM's own included.
 *
 * Docs: docs/guides/transactions.md: a nested transaction "is a savepoint of the request's"
 * and TypeORM's calls behave "as without the library"; `ROLLBACK TO SAVEPOINT` of a savepoint
 * of the app's own is allowed. Nothing says TypeORM's names change.
 *
 * Severity: low (relies on TypeORM's savepoint naming, an implementation detail; but the
 * outcome is silent until the next commit, and loses the outer work with a bare 500).
 *
 * Failed before the fix: 500 Internal server error (QueryFailedError: savepoint "typeorm_2"
 * does not exist), no row. Control: no rollback by name: 201, both rows.
 *
 * Fixed: TypeORM's savepoints are named as without the library: its own savepoint statements
 * (`SAVEPOINT typeorm_N`, their RELEASE and ROLLBACK TO, as its runner sends them) go out one
 * lower, its code's outermost transaction (a BEGIN without the library) under a name of the
 * library's, `idempotency_typeorm_transaction` (`typeormSavepointAsWithout`,
 * lib/data-layers/typeorm-savepoint-names.ts, applied in `LazyTransaction`'s runner `query`;
 * commit a75f8fb). A savepoint rolled back to by TypeORM's name also drops the nested commits
 * noted inside it (see adversary83-orm-own-savepoint-rolled-back-commit-told).
 *
 * Suggested fix: refuse a savepoint statement of its code that names one of TypeORM's
 * (`typeorm_\d+`) with a clear error (the names are the library's under it: use
 * `rollbackTransaction()` or a savepoint of your own), or name the request's level so that
 * TypeORM's names match what they are without the library.
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

@Entity({ name: 'adv83_named_orders', synchronize: false })
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
      // The step undone by the name TypeORM gives its savepoint (TypeORM's docs list them:
      // typeorm_1 for the first nested transaction).
      if (giveUp) await qr.query('ROLLBACK TO SAVEPOINT typeorm_1');
      await qr.commitTransaction();
      qr.data = { tag: `${tag}-outer` };
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

describe('adversary 83 orm: a ROLLBACK TO SAVEPOINT by the name TypeORM gives its savepoint', () => {
  let fixture: TypeormApp;
  let app: INestApplication;

  beforeAll(async () => {
    fixture = await startTypeormApp('adv83_orm_savepoint_by_name', {
      controllers: [BookingController],
      providers: [BookingService],
      entities: [Order],
      subscribers: [RelaySubscriber],
      imports: [TypeOrmModule.forFeature([Order])],
      max: 6,
      idempotency: { globalKeys: true, databaseTimeoutMs: 1500 },
      setup: async (admin) => {
        await admin.query(
          'CREATE TABLE adv83_named_orders (id serial PRIMARY KEY, tag text NOT NULL)',
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
      'SELECT tag FROM adv83_named_orders WHERE tag LIKE $1 ORDER BY id',
      [`${tag}-%`],
    );
    return { status: answer.status, rows: rows.map((row) => row.tag) };
  }

  it('control: no rollback by name: both rows, 201', async () => {
    expect(await scenario('c1', false)).toEqual({ status: 201, rows: ['c1-outer', 'c1-inner'] });
  }, 30_000);

  it('ROLLBACK TO SAVEPOINT typeorm_1 undoes the first nested transaction only, as without the library', async () => {
    expect(await scenario('r1', true)).toEqual({ status: 201, rows: ['r1-outer'] });
  }, 30_000);
});
