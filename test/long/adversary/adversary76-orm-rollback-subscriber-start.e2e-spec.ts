/**
 * Adversary 76 (orm): a `beforeTransactionRollback` subscriber writes an audit of the failed
 * attempt in a transaction of its own, started without awaiting it, then awaits slow I/O (a
 * webhook, a read on another connection). Under `@Idempotent()` the transaction its code was
 * told rolled back is COMMITTED (its order row kept), the audit's rows are lost, and the
 * request answers 201 (stored, replayed). Without the library: the order rolled back, the
 * audit kept.
 *
 *   async beforeTransactionRollback(event) {
 *     audits.push(event.connection.transaction((m) => writeAudit(m)));   // on the side
 *     await notifyWebhook();                                              // slow I/O
 *   }
 *   // handler
 *   await dataSource.transaction(async (m) => { await m.query(INSERT order); throw refused; })
 *     .catch(log);
 *   await Promise.all(audits);
 *
 * Why: the audit's start is asked from inside the rollback's turn (`TurnQueue.run`: "What is
 * asked from inside a turn while it runs ... runs at once"), and nothing holds it for the
 * rollback (`CommitHold` is made only for `BeforeTransactionCommit`, `asOwner` in
 * lib/data-layers/lazy-transaction.ts). It sends SAVEPOINT typeorm_2 (depth 3) while the
 * subscriber awaits its I/O; when the subscriber returns, TypeORM's `rollbackTransaction`
 * sends `ROLLBACK TO SAVEPOINT typeorm_${transactionDepth - 1}` with the depth the audit
 * raised: it rolls back to the AUDIT's savepoint (the audit's first row undone), not the
 * order's, and the order row stays. The `rollingBack` check (`nested.ending(from,
 * 'rollback') === 'beside'`) does not see a transaction started in the turn. The audit's own
 * RELEASE then names `typeorm_1`, the order's savepoint: the order row is kept by the request's
 * COMMIT.
 *
 * Expected (docs/guides/transactions.md, "One request, one connection"): a nested transaction
 * is a savepoint of the request's, rolled back with its code ("A setting made in an inner
 * transaction that rolls back ends with it"); "What cannot be kept apart there is refused, and
 * the request rolls back (500), rather than differ in silence", and "So is [refused] ... a
 * statement sent while the nested transaction's `beforeTransactionRollback` subscribers run".
 * Here it differs in silence.
 *
 * Control: the same app without `@Idempotent()` (201, the audit, no order), and the keyed app
 * whose subscriber awaits no I/O after starting the audit (201, the audit, no order).
 *
 * Severity: high (a transaction the code was told rolled back is committed exactly once more
 * than it should be, and the audit is lost; the 201 is stored and replayed).
 *
 * Fails now: `toContainEqual` of `{ status: 201, replayed: 201, rows: ['after', 'audit',
 * 'audit2'] }` (as without the library) or `{ status: 500, replayed: 500, rows: [] }` (the
 * documented refusal of a statement sent while `beforeTransactionRollback` subscribers run)
 * receives `{ status: 201, replayed: 201, rows: ['after', 'order'] }`. The two controls pass.
 *
 * Suggested fix: give the rollback the hold the commit has (a start asked from
 * `beforeTransactionRollback` subscribers waits for the ROLLBACK TO), and in both cases not
 * decide "awaited" by a tick: refuse (or put off) a commit's RELEASE / rollback's ROLLBACK TO
 * when `transactionDepth` moved during its subscribers, rather than let TypeORM name the wrong
 * savepoint.
 *
 * Fixed: a start a `beforeTransactionRollback` subscriber asks without awaiting it, returning
 * at once, waits for the ROLLBACK TO as one from `beforeTransactionCommit` waits for the
 * RELEASE (`CommitHold`, made for both in `LazyTransaction.asOwner`); one still open (or
 * starting) when the subscribers return after other awaited work (this slow I/O) is refused
 * before the ROLLBACK TO (`SubscriberWatch`, lib/data-layers/subscriber-watch.ts): 500
 * `subscriber_transaction_open`, nothing kept, never the rolled-back order committed.
 */
import { Body, Controller, type INestApplication, Injectable, Post } from '@nestjs/common';
import { InjectDataSource } from '@nestjs/typeorm';
import { Client } from 'pg';
import request from 'supertest';
import {
  DataSource,
  type EntityManager,
  type EntitySubscriberInterface,
  EventSubscriber,
  type TransactionRollbackEvent,
} from 'typeorm';
import { Idempotent } from '../../../lib/index.js';
import { startTypeormApp, type TypeormApp } from '../../support/typeorm-app.js';

type Body76 = { tag: string; slow: boolean; failAudit: boolean };

/** The audit asked for by the next commit (set by the handler), and the audits under way. */
let audit: Body76 | undefined;
const audits: Promise<unknown>[] = [];
const met = new Map<string, string>();
/** Another connection: the subscriber's slow I/O (a webhook, a read elsewhere). */
let elsewhere: Client;

@EventSubscriber()
class AuditSubscriber implements EntitySubscriberInterface {
  async beforeTransactionRollback(event: TransactionRollbackEvent) {
    if (!audit) return;
    const { tag, slow, failAudit } = audit;
    audit = undefined;
    let returning!: () => void;
    const subscriberReturned = new Promise<void>((resolve) => (returning = resolve));
    const written = event.connection.transaction(async (manager: EntityManager) => {
      await manager.query(`INSERT INTO adv76_rows (tag, what) VALUES ($1, 'audit')`, [tag]);
      // The audit's own second step comes once the subscriber is done with its I/O.
      await subscriberReturned;
      await manager.query(`INSERT INTO adv76_rows (tag, what) VALUES ($1, 'audit2')`, [tag]);
      if (failAudit) throw new Error('audit refused');
    });
    audits.push(written.catch((error: unknown) => met.set(`${tag}-audit`, String(error))));
    if (slow) await elsewhere.query('SELECT pg_sleep(0.3)');
    returning();
  }
}

@Injectable()
class OrderService {
  constructor(@InjectDataSource() private readonly dataSource: DataSource) {}

  async run(body: Body76) {
    try {
      await this.dataSource
        .transaction(async (manager: EntityManager) => {
          await manager.query(`INSERT INTO adv76_rows (tag, what) VALUES ($1, 'order')`, [
            body.tag,
          ]);
          audit = body;
          throw new Error('order refused');
        })
        .catch((error: unknown) => met.set(`${body.tag}-order`, String(error)));
      await Promise.all(audits.splice(0));
      await this.dataSource.query(`INSERT INTO adv76_rows (tag, what) VALUES ($1, 'after')`, [
        body.tag,
      ]);
    } catch (error) {
      met.set(body.tag, String(error));
      throw error;
    }
    return { tag: body.tag };
  }
}

@Controller()
class OrderController {
  constructor(private readonly service: OrderService) {}

  @Post('keyed')
  @Idempotent()
  keyed(@Body() body: Body76) {
    return this.service.run(body);
  }

  @Post('plain')
  plain(@Body() body: Body76) {
    return this.service.run(body);
  }
}

describe('adversary 76: TypeORM, beforeTransactionRollback starts an audit unawaited, then awaits slow I/O', () => {
  let fixture: TypeormApp;
  let admin: Client;
  let app: INestApplication;

  beforeAll(async () => {
    fixture = await startTypeormApp('adv76_orm_rollback_start', {
      controllers: [OrderController],
      providers: [OrderService],
      subscribers: [AuditSubscriber],
      max: 6,
      setup: async (admin) => {
        await admin.query(
          'CREATE TABLE adv76_rows (id serial PRIMARY KEY, tag text NOT NULL, what text NOT NULL)',
        );
      },
    });
    ({ admin, app } = fixture);
    elsewhere = new Client({ connectionString: fixture.database.url });
    await elsewhere.connect();
  }, 60_000);

  afterAll(async () => {
    await elsewhere?.end().catch(() => undefined);
    await fixture?.close();
  });

  const kept = async (tag: string) =>
    (
      await admin.query<{ what: string }>(
        'SELECT what FROM adv76_rows WHERE tag = $1 ORDER BY what',
        [tag],
      )
    ).rows.map((row) => row.what);

  const post = (path: string, key: string | undefined, body: Body76) => {
    const call = request(app.getHttpServer()).post(path);
    if (key) call.set('Idempotency-Key', key);
    return call.send(body);
  };

  const outcome = async (path: string, key: string | undefined, body: Body76) => {
    const answer = await post(path, key, body);
    return {
      status: answer.status,
      handler: met.get(body.tag) ?? '',
      audit: met.get(`${body.tag}-audit`) ?? '',
      order: met.get(`${body.tag}-order`) ?? '',
      rows: await kept(body.tag),
    };
  };

  it('control: without @Idempotent(), slow I/O: 201, the audit, the order rolled back', async () => {
    expect(await outcome('/plain', undefined, { tag: 'p1', slow: true, failAudit: false })).toEqual(
      {
        status: 201,
        handler: '',
        audit: '',
        order: 'Error: order refused',
        rows: ['after', 'audit', 'audit2'],
      },
    );
  }, 30_000);

  it('control: keyed, no slow I/O after the unawaited start: 201, the audit, the order rolled back', async () => {
    expect(await outcome('/keyed', 'k0', { tag: 'k0', slow: false, failAudit: false })).toEqual({
      status: 201,
      handler: '',
      audit: '',
      order: 'Error: order refused',
      rows: ['after', 'audit', 'audit2'],
    });
  }, 30_000);

  it('keyed, slow I/O: the order rolled back (201 with the audit, or refused: 500, nothing kept)', async () => {
    const body: Body76 = { tag: 'k1', slow: true, failAudit: false };
    const first = await outcome('/keyed', 'k1', body);
    const replay = await post('/keyed', 'k1', body);
    const seen = { status: first.status, replayed: replay.status, rows: first.rows };
    // Either as without the library, or the documented refusal of a statement sent while the
    // rollback's subscribers run (500 transaction_aborted, nothing kept, the retry runs again).
    expect([
      { status: 201, replayed: 201, rows: ['after', 'audit', 'audit2'] },
      { status: 500, replayed: 500, rows: [] },
    ]).toContainEqual(seen);
  }, 30_000);
});
