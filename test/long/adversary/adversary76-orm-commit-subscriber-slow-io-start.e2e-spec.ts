/**
 * Adversary 76 (orm): a `beforeTransactionCommit` subscriber starts an audit transaction
 * without awaiting it (an audit written on the side), then awaits slow I/O of its own (a
 * webhook, a read on another connection), and the audit is still open when the subscriber
 * returns. The request answers 500 with everything rolled back; without the library, 201 and
 * every row.
 *
 *   async beforeTransactionCommit(event) {
 *     audits.push(event.connection.transaction((m) => writeAudit(m)));   // on the side
 *     await notifyWebhook();                                              // slow I/O
 *   }
 *
 * Why: `CommitHold.startMayRun` (lib/data-layers/commit-hold.ts) tells a start the subscriber
 * does not await from one it awaits by "the subscribers not having returned a tick after it was
 * asked". A subscriber awaiting anything else (its I/O) has not returned either, so the audit's
 * start runs at once (`startFrom` in `LazyTransaction.ensureRunner`), inside the committing
 * transaction (SAVEPOINT typeorm_2, depth 3). When the subscriber returns, TypeORM's
 * `commitTransaction` sends `RELEASE SAVEPOINT typeorm_${transactionDepth - 1}` with the depth
 * the audit raised: it releases the audit's savepoint, not the committing one's (`commitFrom`
 * checked `nested.ending(...)` before the broadcast, when the audit was not open yet). The
 * audit's own RELEASE then names a savepoint already gone: 3B001, the transaction aborted.
 *
 * The same, and more natural, when what the subscriber awaits after the unawaited start is a
 * write of its own through `event.manager` (a summary row of the committing transaction): the
 * audit meets `savepoint "typeorm_1" does not exist`, the request 500.
 *
 * Expected (docs/guides/transactions.md, "One request, one connection"): "One a
 * `beforeTransactionCommit` subscriber starts without awaiting it (an audit written on the
 * side) waits for that commit's `RELEASE`, then runs in its turn; one it awaits runs at once,
 * inside the committing transaction." This subscriber does not await it.
 *
 * Control: the same app without `@Idempotent()` (201, every row), and the keyed app whose
 * subscriber awaits no I/O after starting the audit (the documented unawaited case: 201, every
 * row).
 *
 * Severity: medium (a false 500 `transaction_aborted` for correct usage, every retry the same;
 * nothing wrong committed: the whole request rolls back).
 *
 * Fails now: `toEqual({ status: 201, handler: '', audit: '', rows: [...] })` receives
 * `{ status: 500, audit: 'QueryFailedError: savepoint "typeorm_2" does not exist',
 * handler: 'QueryFailedError: current transaction is aborted, commands ignored until end of
 * transaction block', rows: [] }`; the `event.manager` case the same with `savepoint
 * "typeorm_1" does not exist`. The three controls pass.
 *
 * Suggested fix: do not guess "awaited" from a tick. Either put the committing transaction's
 * RELEASE off while a transaction its subscribers started is open (release it, under its own
 * name, once that one ended, as `commitLater` does for a later-begun one), or send the RELEASE
 * with the depth the commit was checked at (`typeorm_<depth - 1>` as read before the
 * broadcast) and keep the audit's savepoint open inside the committed one's parent.
 *
 * Fixed: a transaction event's subscribers that return with a transaction they started still
 * open (or starting) are told apart by what is known (the starts they asked that ran at once
 * and have not settled, and the runner's depth), not by a tick: `SubscriberWatch`
 * (lib/data-layers/subscriber-watch.ts), checked in `LazyTransaction.asOwner` as the
 * broadcast returns, refuses the commit before its RELEASE with `SubscriberTransactionOpenError`
 * (500 `subscriber_transaction_open`, rolled back, nothing stored), never the wrong savepoint.
 * Changed (fixer): the two keyed cases expect that clear refusal, not 201: on one connection
 * TypeORM itself would RELEASE the audit's savepoint here (it names it by the depth the audit
 * raised), and keeping the audit open inside the committed one's parent would need its later
 * RELEASE renamed; the documented rule (docs/guides/transactions.md) now says so. The
 * unawaited start whose subscriber returns at once still waits for the RELEASE (201).
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
  type TransactionCommitEvent,
} from 'typeorm';
import { Idempotent } from '../../../lib/index.js';
import { startTypeormApp, type TypeormApp } from '../../support/typeorm-app.js';

type Body76 = { tag: string; slow: boolean; failAudit: boolean; own?: boolean };

/** The audit asked for by the next commit (set by the handler), and the audits under way. */
let audit: Body76 | undefined;
const audits: Promise<unknown>[] = [];
const met = new Map<string, string>();
/** Another connection: the subscriber's slow I/O (a webhook, a read elsewhere). */
let elsewhere: Client;

@EventSubscriber()
class AuditSubscriber implements EntitySubscriberInterface {
  async beforeTransactionCommit(event: TransactionCommitEvent) {
    if (!audit) return;
    const { tag, slow, failAudit, own } = audit;
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
    // Its own write through the committing transaction's manager, or slow I/O elsewhere.
    if (own) {
      await event.manager.query(`INSERT INTO adv76_rows (tag, what) VALUES ($1, 'counted')`, [tag]);
    } else if (slow) await elsewhere.query('SELECT pg_sleep(0.3)');
    returning();
  }
}

@Injectable()
class OrderService {
  constructor(@InjectDataSource() private readonly dataSource: DataSource) {}

  async run(body: Body76) {
    try {
      await this.dataSource.transaction(async (manager: EntityManager) => {
        await manager.query(`INSERT INTO adv76_rows (tag, what) VALUES ($1, 'order')`, [body.tag]);
        audit = body;
      });
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

describe('adversary 76: TypeORM, beforeTransactionCommit starts an audit unawaited, then awaits slow I/O', () => {
  let fixture: TypeormApp;
  let admin: Client;
  let app: INestApplication;

  beforeAll(async () => {
    fixture = await startTypeormApp('adv76_orm_commit_slow_io', {
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
      rows: await kept(body.tag),
    };
  };

  it('control: without @Idempotent(), slow I/O, audit ok: 201, every row', async () => {
    expect(await outcome('/plain', undefined, { tag: 'p1', slow: true, failAudit: false })).toEqual(
      { status: 201, handler: '', audit: '', rows: ['after', 'audit', 'audit2', 'order'] },
    );
  }, 30_000);

  it('control: keyed, no slow I/O after the unawaited start: 201, every row', async () => {
    expect(await outcome('/keyed', 'k0', { tag: 'k0', slow: false, failAudit: false })).toEqual({
      status: 201,
      handler: '',
      audit: '',
      rows: ['after', 'audit', 'audit2', 'order'],
    });
  }, 30_000);

  /** The documented refusal: before the RELEASE, rolled back, nothing kept, clear words. */
  const refused = {
    status: 500,
    code: 'subscriber_transaction_open',
    handler: expect.stringMatching(
      /^SubscriberTransactionOpenError: A TypeORM beforeTransactionCommit subscriber started a transaction/,
    ) as unknown,
    rows: [],
  };

  const refusal = async (key: string, body: Body76) => {
    const answer = await post('/keyed', key, body);
    return {
      status: answer.status,
      code: (answer.body as { code?: string }).code,
      handler: met.get(body.tag) ?? '',
      rows: await kept(body.tag),
    };
  };

  it('keyed, slow I/O, audit ok: refused before the RELEASE, nothing kept', async () => {
    expect(await refusal('k1', { tag: 'k1', slow: true, failAudit: false })).toEqual(refused);
  }, 30_000);

  it('control: without @Idempotent(), its own write after the start: 201, every row', async () => {
    const body = { tag: 'p3', slow: false, failAudit: false, own: true };
    expect(await outcome('/plain', undefined, body)).toEqual({
      status: 201,
      handler: '',
      audit: '',
      rows: ['after', 'audit', 'audit2', 'counted', 'order'],
    });
  }, 30_000);

  it('keyed, its own write through event.manager after the start: refused, nothing kept', async () => {
    const body = { tag: 'k3', slow: false, failAudit: false, own: true };
    expect(await refusal('k3', body)).toEqual(refused);
  }, 30_000);
});
