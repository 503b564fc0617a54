/**
 * Adversary 77 (orm): a `beforeTransactionCommit` subscriber that refuses a commit (throws)
 * after starting, without awaiting it, an audit transaction recording the refusal (an audit
 * written on the side). The handler catches the refused transaction and answers that the
 * order was refused. Without the library: 201, the order rolled back, the audit kept. Keyed:
 * 500 `transaction_aborted`, nothing kept, and every retry the same.
 *
 *   @EventSubscriber() class LimitGuard {
 *     async beforeTransactionCommit(event) {
 *       if (!overLimit()) return;
 *       audits.push(event.connection.transaction((m) => writeRefusal(m)));   // on the side
 *       throw new Error('order over the limit');                              // refuse
 *     }
 *   }
 *   // handler
 *   try { await dataSource.transaction((m) => placeOrder(m)); }
 *   catch { outcome = 'refused'; }
 *   await Promise.all(audits); return { outcome };
 *
 * Why: lib/data-layers/lazy-transaction.ts `asOwner`: the commit's `CommitHold` (which holds
 * the unawaited start "until that commit's RELEASE") is released in its `finally`
 * (`hold?.releasedNow()`) also when the commit FAILED: no RELEASE was sent, the handler's
 * savepoint (typeorm_1) is still open and TypeORM's `transaction()` is about to roll it back.
 * The audit's start runs in that gap, inside the refused transaction (`SAVEPOINT typeorm_2`,
 * its inserts, `RELEASE SAVEPOINT typeorm_2`). TypeORM's rollback of the handler's transaction
 * then arrives while the audit is open or starting, no longer the innermost, and is refused
 * ("rollbackTransaction() of a nested transaction while another, begun after it through
 * another query runner, is still open": `rollbackInTurn`'s `endsOnArrival` or
 * `rollbackFrom`'s `refuseOutOfOrder`, both `this.refuse`); TypeORM swallows the rollback's
 * error (its `transaction()` catches it), the handler answers, and the request ends 500
 * `transaction_aborted`. The statements seen: BEGIN; SAVEPOINT typeorm_1; INSERT order;
 * SAVEPOINT typeorm_2; INSERT audit; INSERT audit2; RELEASE SAVEPOINT typeorm_2; INSERT after;
 * ROLLBACK (no ROLLBACK TO SAVEPOINT typeorm_1 ever sent).
 *
 * Expected (docs/guides/transactions.md, "One request, one connection"): "One a
 * `beforeTransactionCommit` (or `beforeTransactionRollback`) subscriber starts without
 * awaiting it (an audit written on the side), returning at once, waits for that commit's
 * `RELEASE` (that rollback's `ROLLBACK TO`), then runs in its turn"; and a subscriber's error
 * refuses the commit as in TypeORM. Nothing says a refused commit's side audit aborts the
 * request; the refusal (`subscriber_transaction_open`) is documented only for a subscriber
 * that returns with its transaction open, and this one is not even counted as open.
 *
 * Control: the same app without `@Idempotent()` (201 `refused`, the order rolled back, the
 * audit kept); the keyed app whose subscriber refuses without an audit (201 `refused`); the
 * keyed app whose subscriber lets the commit through (201 `placed`).
 *
 * Severity: medium (a false 500 answered for correct TypeORM code, on every retry; nothing
 * wrong committed: the request rolls back; the audit's code was told it committed).
 *
 * Fails now: the keyed refused case receives `{ status: 500, body: { code:
 * 'transaction_aborted', … }, rows: [] }` where `{ status: 201, body: { tag: 'k1', outcome:
 * 'refused' }, rows: ['after', 'audit', 'audit2'] }` is expected. The three controls pass.
 *
 * Suggested fix: release a commit's held starts at its RELEASE only when the commit succeeded;
 * when it failed before the RELEASE (a subscriber threw), keep them held until the
 * transaction's end that follows (TypeORM's `ROLLBACK TO`, or the request's end), as the
 * held starts of a rollback's subscribers are; or refuse such a start at once with a clear
 * error rather than let it nest in the transaction being refused.
 *
 * Fixed: `LazyTransaction.asOwner` (lib/data-layers/lazy-transaction.ts) releases a commit's
 * held starts only once its transaction ended (its RELEASE or ROLLBACK TO sent); a commit that
 * failed before its RELEASE keeps them in `heldPastFailedEnd` until that transaction's end that
 * follows (`nestedEnded`: TypeORM's rollback of it), or the request's end (`refuseLeftOpen`,
 * where they fail). A held start now waits before asking its turn (not inside the commit's
 * turn, which the rollback would queue behind), and runs in a turn of its own after the
 * rollback's ROLLBACK TO, as the next nested transaction of the request.
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

type Body77 = { tag: string; refuse: boolean; audit: boolean };

let pending: Body77 | undefined;
const audits: Promise<unknown>[] = [];
const met = new Map<string, string>();

@EventSubscriber()
class GuardSubscriber implements EntitySubscriberInterface {
  async beforeTransactionCommit(event: TransactionCommitEvent) {
    const body = pending;
    if (!body) return;
    pending = undefined;
    if (!body.refuse) return;
    if (!body.audit) throw new Error('order over the limit');
    // The refusal recorded on the side, whatever becomes of the transaction refused.
    const written = event.connection.transaction(async (manager: EntityManager) => {
      await manager.query(`INSERT INTO adv77_rows (tag, what) VALUES ($1, 'audit')`, [body.tag]);
      await manager.query(`INSERT INTO adv77_rows (tag, what) VALUES ($1, 'audit2')`, [body.tag]);
    });
    audits.push(written.catch((error: unknown) => met.set(`${body.tag}-audit`, String(error))));
    throw new Error('order over the limit');
  }
}

@Injectable()
class OrderService {
  constructor(@InjectDataSource() private readonly dataSource: DataSource) {}

  async run(body: Body77) {
    let outcome = 'placed';
    try {
      await this.dataSource.transaction(async (manager: EntityManager) => {
        await manager.query(`INSERT INTO adv77_rows (tag, what) VALUES ($1, 'order')`, [body.tag]);
        pending = body;
      });
    } catch (error) {
      pending = undefined;
      met.set(`${body.tag}-refused`, String(error));
      outcome = 'refused';
    }
    try {
      await Promise.all(audits.splice(0));
      await this.dataSource.query(`INSERT INTO adv77_rows (tag, what) VALUES ($1, 'after')`, [
        body.tag,
      ]);
    } catch (error) {
      met.set(body.tag, String(error));
      throw error;
    }
    return { tag: body.tag, outcome };
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

describe('adversary 77: TypeORM, a beforeTransactionCommit subscriber throws after an unawaited audit', () => {
  let fixture: TypeormApp;
  let admin: Client;
  let app: INestApplication;

  beforeAll(async () => {
    fixture = await startTypeormApp('adv77_orm_throwing_commit_sub', {
      controllers: [OrderController],
      providers: [OrderService],
      subscribers: [GuardSubscriber],
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
      body: answer.body as unknown,
      handler: met.get(body.tag) ?? '',
      refused: met.get(`${body.tag}-refused`) ?? '',
      audit: met.get(`${body.tag}-audit`) ?? '',
      rows: await kept(body.tag),
    };
  };

  it('control: without @Idempotent(): 201 refused, the order rolled back, the audit kept', async () => {
    expect(await outcome('/plain', undefined, { tag: 'p1', refuse: true, audit: true })).toEqual({
      status: 201,
      body: { tag: 'p1', outcome: 'refused' },
      handler: '',
      refused: 'Error: order over the limit',
      audit: '',
      rows: ['after', 'audit', 'audit2'],
    });
  }, 30_000);

  it('control: keyed, the commit let through: 201 placed', async () => {
    expect(await outcome('/keyed', 'k-placed', { tag: 'k0', refuse: false, audit: false })).toEqual(
      {
        status: 201,
        body: { tag: 'k0', outcome: 'placed' },
        handler: '',
        refused: '',
        audit: '',
        rows: ['after', 'order'],
      },
    );
  }, 30_000);

  it('control: keyed, refused without an audit: 201 refused, the order rolled back', async () => {
    expect(await outcome('/keyed', 'k-bare', { tag: 'k2', refuse: true, audit: false })).toEqual({
      status: 201,
      body: { tag: 'k2', outcome: 'refused' },
      handler: '',
      refused: 'Error: order over the limit',
      audit: '',
      rows: ['after'],
    });
  }, 30_000);

  it('keyed, refused with the audit on the side: 201 refused, the audit kept', async () => {
    expect(await outcome('/keyed', 'k-audit', { tag: 'k1', refuse: true, audit: true })).toEqual({
      status: 201,
      body: { tag: 'k1', outcome: 'refused' },
      handler: '',
      refused: 'Error: order over the limit',
      audit: '',
      rows: ['after', 'audit', 'audit2'],
    });
  }, 30_000);
});
