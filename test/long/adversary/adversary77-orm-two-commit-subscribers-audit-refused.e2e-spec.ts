/**
 * Adversary 77 (orm): two `beforeTransactionCommit` subscribers, each written as the docs say.
 * One writes a summary row of the committing transaction through `event.manager` (awaited: it
 * starts no transaction). The other starts an audit transaction without awaiting it and
 * returns at once (the documented "audit written on the side"). Alone, each passes (201). Side
 * by side, the request is refused with 500 `subscriber_transaction_open`, every row rolled
 * back, and every retry the same; without the library, 201 and every row.
 *
 *   @EventSubscriber() class CountSubscriber {
 *     async beforeTransactionCommit(event) {
 *       await event.manager.query(`INSERT INTO counts …`);         // awaited, no transaction
 *     }
 *   }
 *   @EventSubscriber() class AuditSubscriber {
 *     beforeTransactionCommit(event) {
 *       audits.push(event.connection.transaction((m) => writeAudit(m)));  // on the side
 *     }                                                                    // returns at once
 *   }
 *
 * Why: `CommitHold.startMayRun` (lib/data-layers/commit-hold.ts) decides "the subscriber awaits
 * this start" from `subscribersDone` a tick after the start was asked; `subscribersReturned()`
 * is called in `LazyTransaction.asOwner` only once `base.broadcast` returns, i.e. once ALL the
 * event's subscribers have (TypeORM awaits them with one `Promise.all`). The audit
 * subscriber returned at once, but the count subscriber's awaited write is still in flight a
 * tick later, so the audit's start is taken as awaited: it runs at once inside the committing
 * transaction and is counted by `SubscriberWatch.startBegan`. When the count subscriber's write
 * answers, the broadcast returns with the audit still starting (its SAVEPOINT queued behind
 * that write) and `SubscriberWatch.leftOpen` refuses the commit.
 *
 * Expected (docs/guides/transactions.md, "One request, one connection"): "One a
 * `beforeTransactionCommit` (or `beforeTransactionRollback`) subscriber starts without
 * awaiting it (an audit written on the side), returning at once, waits for that commit's
 * `RELEASE` (that rollback's `ROLLBACK TO`), then runs in its turn". The audit subscriber
 * returns at once; the refusal is documented only for a subscriber that "starts and leaves
 * open … having awaited something else after the start". Neither subscriber does that; and
 * nothing says another subscriber of the same event changes what one may do.
 *
 * Control: the same app without `@Idempotent()` (201, every row); the keyed app with only the
 * audit subscriber at work (201), and with only the count subscriber at work (201).
 *
 * Severity: medium (a false 500 answered for correct usage, on every retry: the endpoint is
 * unusable; nothing wrong committed, the request rolls back).
 *
 * Fails now: the keyed case with both subscribers receives `{ status: 500, code:
 * 'subscriber_transaction_open', handler: 'SubscriberTransactionOpenError: A TypeORM
 * beforeTransactionCommit subscriber started a transaction …', audit: 'TransactionEndedError:
 * …', rows: [] }` where `{ status: 201, rows: ['after', 'audit', 'count', 'order'] }` is
 * expected. The three controls pass.
 *
 * Suggested fix: tell a start apart by the subscriber that asked it, not by the event's
 * subscribers as a whole: wrap each subscriber's call (the broadcaster calls them one by one)
 * so `CommitHold` knows whether the asking subscriber's own promise has settled a tick after
 * the start; a start whose own subscriber returned waits for the RELEASE, whatever the others
 * still await.
 *
 * Fixed: a start is told apart by the subscriber that asked it. The ending event's subscribers
 * are called one by one through `CommitHold.subscriberCall` (lib/data-layers/subscriber-calls.ts,
 * TypeORM's own loop, each call run in an AsyncLocalStorage record of its own), and
 * `CommitHold.startMayRun` (lib/data-layers/commit-hold.ts, decision `startWaits`) reads the
 * asking subscriber's call as the start is asked: its own promise settled a tick later, the
 * start waits for the RELEASE (not counted by `SubscriberWatch`), whatever the others still
 * await. The wait is bounded by the module's deadline (`LazyTransaction.heldStart`), so a
 * subscriber of the same event that awaits that start is refused, never a hang.
 */
import { Body, Controller, type INestApplication, Injectable, Post } from '@nestjs/common';
import { InjectDataSource } from '@nestjs/typeorm';
import { type Client } from 'pg';
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

type Body77 = { tag: string; count: boolean; audit: boolean };

/** What the handler's commit asks its subscribers for (set inside its transaction). */
let pending: Body77 | undefined;
const counted = new Set<string>();
const audited = new Set<string>();
const audits: Promise<unknown>[] = [];
const met = new Map<string, string>();

@EventSubscriber()
class CountSubscriber implements EntitySubscriberInterface {
  async beforeTransactionCommit(event: TransactionCommitEvent) {
    const body = pending;
    if (!body?.count || counted.has(body.tag)) return;
    counted.add(body.tag);
    await event.manager.query(`INSERT INTO adv77_rows (tag, what) VALUES ($1, 'count')`, [
      body.tag,
    ]);
  }
}

@EventSubscriber()
class AuditSubscriber implements EntitySubscriberInterface {
  beforeTransactionCommit(event: TransactionCommitEvent) {
    const body = pending;
    if (!body?.audit || audited.has(body.tag)) return;
    audited.add(body.tag);
    const written = event.connection.transaction(async (manager: EntityManager) => {
      await manager.query(`INSERT INTO adv77_rows (tag, what) VALUES ($1, 'audit')`, [body.tag]);
    });
    audits.push(written.catch((error: unknown) => met.set(`${body.tag}-audit`, String(error))));
  }
}

@Injectable()
class OrderService {
  constructor(@InjectDataSource() private readonly dataSource: DataSource) {}

  async run(body: Body77) {
    try {
      await this.dataSource.transaction(async (manager: EntityManager) => {
        await manager.query(`INSERT INTO adv77_rows (tag, what) VALUES ($1, 'order')`, [body.tag]);
        pending = body;
      });
      pending = undefined;
      await Promise.all(audits.splice(0));
      await this.dataSource.query(`INSERT INTO adv77_rows (tag, what) VALUES ($1, 'after')`, [
        body.tag,
      ]);
    } catch (error) {
      pending = undefined;
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
  keyed(@Body() body: Body77) {
    return this.service.run(body);
  }

  @Post('plain')
  plain(@Body() body: Body77) {
    return this.service.run(body);
  }
}

describe('adversary 77: TypeORM, two beforeTransactionCommit subscribers: an awaited write beside an unawaited audit', () => {
  let fixture: TypeormApp;
  let admin: Client;
  let app: INestApplication;

  beforeAll(async () => {
    fixture = await startTypeormApp('adv77_orm_two_commit_subs', {
      controllers: [OrderController],
      providers: [OrderService],
      subscribers: [CountSubscriber, AuditSubscriber],
      max: 6,
      setup: async (admin) => {
        await admin.query(
          'CREATE TABLE adv77_rows (id serial PRIMARY KEY, tag text NOT NULL, what text NOT NULL)',
        );
      },
    });
    ({ admin, app } = fixture);
  }, 60_000);

  afterAll(async () => {
    await fixture?.close();
  });

  const kept = async (tag: string) =>
    (
      await admin.query<{ what: string }>(
        'SELECT what FROM adv77_rows WHERE tag = $1 ORDER BY what',
        [tag],
      )
    ).rows.map((row) => row.what);

  const outcome = async (path: string, key: string | undefined, body: Body77) => {
    const call = request(app.getHttpServer()).post(path);
    if (key) call.set('Idempotency-Key', key);
    const answer = await call.send(body);
    return {
      status: answer.status,
      code: (answer.body as { code?: string }).code,
      handler: met.get(body.tag) ?? '',
      audit: met.get(`${body.tag}-audit`) ?? '',
      rows: await kept(body.tag),
    };
  };

  const ok = (rows: string[]) => ({ status: 201, code: undefined, handler: '', audit: '', rows });

  it('control: without @Idempotent(), both subscribers: 201, every row', async () => {
    expect(await outcome('/plain', undefined, { tag: 'p1', count: true, audit: true })).toEqual(
      ok(['after', 'audit', 'count', 'order']),
    );
  }, 30_000);

  it('control: keyed, only the unawaited audit: 201, every row', async () => {
    expect(await outcome('/keyed', 'k-audit', { tag: 'k1', count: false, audit: true })).toEqual(
      ok(['after', 'audit', 'order']),
    );
  }, 30_000);

  it('control: keyed, only the awaited write through event.manager: 201, every row', async () => {
    expect(await outcome('/keyed', 'k-count', { tag: 'k2', count: true, audit: false })).toEqual(
      ok(['after', 'count', 'order']),
    );
  }, 30_000);

  it('keyed, both subscribers, each as documented: 201, every row', async () => {
    expect(await outcome('/keyed', 'k-both', { tag: 'k3', count: true, audit: true })).toEqual(
      ok(['after', 'audit', 'count', 'order']),
    );
  }, 30_000);
});
