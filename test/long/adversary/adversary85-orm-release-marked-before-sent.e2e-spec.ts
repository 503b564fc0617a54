/**
 * Adversary 85 (orm): round 83's fix tracks the code's savepoints by name
 * (`AfterRequestCommit.savepointSent`), but it moves its marks when a statement is judged,
 * before it is sent, whether or not PostgreSQL then runs it. A `RELEASE SAVEPOINT step` that
 * never ran (it followed a failing statement in the same text, or it failed itself because a
 * failure the code caught had aborted the transaction) still drops `step` from the marks; the
 * `ROLLBACK TO SAVEPOINT step` that follows (the code's ordinary recovery) then finds no mark,
 * and the nested commit made inside `step`, whose work PostgreSQL just undid, is told to
 * `afterTransactionCommit` after the request's COMMIT: a mail or an outbox kick for a row that
 * does not exist.
 *
 *   @EventSubscriber() class Relay { afterTransactionCommit(e) { mail(e.queryRunner.data.tag) } }
 *
 *   await qr.startTransaction();                              // the booking
 *   await qr.manager.save(Order, { tag: 'outer' });
 *   await qr.query('SAVEPOINT step');                         // a step that may be given up alone
 *   try {
 *     await qr.startTransaction();                            // the step's own unit (a service's)
 *     await qr.manager.save(Order, { tag: 'inner' });
 *     await qr.commitTransaction();
 *     // (a) one round trip:
 *     await qr.query(`INSERT INTO adv85_skus VALUES ('taken'); RELEASE SAVEPOINT step`);
 *     // (b) or a "best effort" write whose error is swallowed, then the RELEASE (25P02):
 *     try { await qr.query(`INSERT INTO adv85_skus VALUES ('taken')`); } catch {}
 *     await qr.query('RELEASE SAVEPOINT step');
 *   } catch {
 *     await qr.query('ROLLBACK TO SAVEPOINT step');           // the step undone (it is)
 *   }
 *   await qr.commitTransaction();
 *
 * Code path: lib/data-layers/lazy-transaction.ts `judge` calls
 * `this.afterCommit.savepointSent(control, …)` for each savepoint statement of the text
 * before `queryFrom` sends it; lib/data-layers/after-request-commit.ts `savepointMarksAfter`
 * slices `step` off for the RELEASE; the later `ROLLBACK TO SAVEPOINT step` finds no mark
 * (`at < 0`: "changes nothing"), so `undoneBy` never drops the inner commit's note, and
 * `tell` broadcasts it after the request's COMMIT.
 *
 * Docs: docs/guides/transactions.md, `afterTransactionCommit`: "never for a nested commit that
 * an enclosing transaction of its code then rolled back (its `ROLLBACK TO` undid that commit's
 * work too), whether through TypeORM's `rollbackTransaction()` or a `ROLLBACK TO SAVEPOINT` of
 * a savepoint of its own set before that commit"; "TypeORM's transaction events mean what
 * they say".
 *
 * Severity: medium (a wrong event told, (c) an event lost for a durable commit: an outbox
 * kick never made; (a), (b): a side effect promised only for durable work runs
 * for work PostgreSQL rolled back; answer and rows are right).
 *
 * Failed (round 85): (a) and (b) answer 201 with rows ['a1-outer'] / ['b1-outer'], but the subscriber
 * is told ['a1-inner', 'a1-outer'] / ['b1-inner', 'b1-outer'].
 * (c) The opposite direction, an event lost for durable work: a `withSavepoint('sp', …)` helper
 * called inside another of the same name; the outer step made a nested commit, the inner one
 * swallows a failure and its RELEASE fails (25P02) but drops the inner `sp`'s mark, so its
 * `ROLLBACK TO SAVEPOINT sp` (PostgreSQL: back to the inner `sp`, the commit kept) is read as
 * one to the outer `sp`: the kept commit's note is dropped, its row committed, never told:
 * 201, rows ['n2-outer', 'n2-kept'], told ['n2-outer'] only.
 * Control: the same step with the RELEASE sent alone after the failing INSERT (never sent):
 * rows ['c1-outer'], told ['c1-outer'].
 *
 * Suggested fix: move the marks when the statement succeeded, not when it is judged (in
 * `queryFrom` after `await sent`, and the client's and stream's paths alike); for a text of
 * several statements that fails, apply only the controls PostgreSQL ran (none of those after
 * the failing statement: in a transaction block a simple-query text stops at its first error;
 * those before it ran). A failed RELEASE / ROLLBACK TO changes nothing on the server.
 *
 * Fixed: lib/data-layers/lazy-transaction.ts `judge` hands back what to mark (`Inside`), and
 * `queryFrom`, `streamFrom` and `clientOf` (`sentWatched`) mark it once the text answered,
 * only the savepoint statements PostgreSQL ran (after-request-commit.ts `controlsRan`: all
 * when it ran; none after a 25P02; on another failure those before its first other
 * statement) (commit "typeorm: savepoint marks once the statement ran").
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

@Entity({ name: 'adv85_marks_orders', synchronize: false })
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

type Mode = 'apart' | 'one-text' | 'swallowed' | 'nested-ok' | 'nested-swallowed';

const TAKEN = `INSERT INTO adv85_skus (sku) VALUES ('taken')`;

@Injectable()
class BookingService {
  constructor(@InjectDataSource() private readonly dataSource: DataSource) {}

  async book(tag: string, mode: Mode) {
    if (mode === 'nested-ok' || mode === 'nested-swallowed') return this.nested(tag, mode);
    const qr = this.dataSource.createQueryRunner();
    try {
      await qr.startTransaction();
      qr.data = { tag: `${tag}-outer` };
      await qr.manager.save(Order, { tag: `${tag}-outer` });
      await qr.query('SAVEPOINT step'); // the step may be given up on its own
      try {
        await qr.startTransaction();
        qr.data = { tag: `${tag}-inner` };
        await qr.manager.save(Order, { tag: `${tag}-inner` });
        await qr.commitTransaction();
        qr.data = { tag: `${tag}-outer` };
        if (mode === 'one-text') {
          await qr.query(`${TAKEN}; RELEASE SAVEPOINT step`);
        } else if (mode === 'swallowed') {
          try {
            await qr.query(TAKEN); // best effort: "already there" is fine
          } catch {
            // swallowed
          }
          await qr.query('RELEASE SAVEPOINT step'); // 25P02: the transaction is aborted
        } else {
          await qr.query(TAKEN);
          await qr.query('RELEASE SAVEPOINT step');
        }
      } catch {
        qr.data = { tag: `${tag}-outer` };
        await qr.query('ROLLBACK TO SAVEPOINT step'); // the step undone
      }
      await qr.commitTransaction();
      return { tag, mode };
    } finally {
      await qr.release();
    }
  }

  async nested(tag: string, mode: 'nested-ok' | 'nested-swallowed') {
    const qr = this.dataSource.createQueryRunner();
    try {
      await qr.startTransaction();
      qr.data = { tag: `${tag}-outer` };
      await qr.manager.save(Order, { tag: `${tag}-outer` });
      await qr.query('SAVEPOINT sp'); // the outer helper's
      await qr.startTransaction();
      qr.data = { tag: `${tag}-kept` };
      await qr.manager.save(Order, { tag: `${tag}-kept` });
      await qr.commitTransaction(); // kept: the outer step is never undone
      qr.data = { tag: `${tag}-outer` };
      await qr.query('SAVEPOINT sp'); // the inner helper's (same name)
      try {
        if (mode === 'nested-swallowed') {
          try {
            await qr.query(TAKEN);
          } catch {
            // swallowed
          }
        }
        await qr.query('RELEASE SAVEPOINT sp');
      } catch {
        await qr.query('ROLLBACK TO SAVEPOINT sp'); // the inner sp: the kept commit stays
        await qr.query('RELEASE SAVEPOINT sp');
      }
      await qr.query('RELEASE SAVEPOINT sp'); // the outer helper done
      await qr.commitTransaction();
      return { tag, mode };
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
  book(@Body() body: { tag: string; mode: Mode }) {
    return this.bookings.book(body.tag, body.mode);
  }
}

describe('adversary 85 orm: a RELEASE SAVEPOINT that never ran unmarks the savepoint; its ROLLBACK TO then undoes a commit still told', () => {
  let fixture: TypeormApp;
  let app: INestApplication;

  beforeAll(async () => {
    fixture = await startTypeormApp('adv85_orm_release_marked', {
      controllers: [BookingController],
      providers: [BookingService],
      entities: [Order],
      subscribers: [RelaySubscriber],
      imports: [TypeOrmModule.forFeature([Order])],
      max: 6,
      idempotency: { globalKeys: true, databaseTimeoutMs: 1500 },
      setup: async (admin) => {
        await admin.query(
          'CREATE TABLE adv85_marks_orders (id serial PRIMARY KEY, tag text NOT NULL)',
        );
        await admin.query('CREATE TABLE adv85_skus (sku text PRIMARY KEY)');
        await admin.query(`INSERT INTO adv85_skus (sku) VALUES ('taken')`);
      },
    });
    ({ app } = fixture);
  }, 60_000);

  afterAll(async () => {
    await fixture?.close();
  });

  async function scenario(tag: string, mode: Mode) {
    told.length = 0;
    const answer = await request(app.getHttpServer())
      .post('/book')
      .set('Idempotency-Key', `key-${tag}`)
      .send({ tag, mode });
    const { rows } = await fixture.admin.query<{ tag: string }>(
      'SELECT tag FROM adv85_marks_orders WHERE tag LIKE $1 ORDER BY id',
      [`${tag}-%`],
    );
    return { status: answer.status, rows: rows.map((row) => row.tag), told: [...told] };
  }

  it('control: the RELEASE after the failing INSERT, never sent: the step undone, only the outer commit told', async () => {
    expect(await scenario('c1', 'apart')).toEqual({
      status: 201,
      rows: ['c1-outer'],
      told: ['c1-outer'],
    });
  }, 30_000);

  it('a RELEASE in one text after a failing INSERT never ran: the undone inner commit is not told', async () => {
    expect(await scenario('a1', 'one-text')).toEqual({
      status: 201,
      rows: ['a1-outer'],
      told: ['a1-outer'],
    });
  }, 30_000);

  it('a RELEASE refused in an aborted transaction never ran: the undone inner commit is not told', async () => {
    expect(await scenario('b1', 'swallowed')).toEqual({
      status: 201,
      rows: ['b1-outer'],
      told: ['b1-outer'],
    });
  }, 30_000);

  it('control: nested helpers on one name, the inner RELEASE run: the kept nested commit told', async () => {
    expect(await scenario('n1', 'nested-ok')).toEqual({
      status: 201,
      rows: ['n1-outer', 'n1-kept'],
      told: ['n1-kept', 'n1-outer'],
    });
  }, 30_000);

  it('nested helpers on one name, the inner RELEASE refused (25P02): its ROLLBACK TO reaches the inner sp; the kept commit is still told', async () => {
    expect(await scenario('n2', 'nested-swallowed')).toEqual({
      status: 201,
      rows: ['n2-outer', 'n2-kept'],
      told: ['n2-kept', 'n2-outer'],
    });
  }, 30_000);
});
