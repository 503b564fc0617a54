/**
 * Adversary 76 (orm): a `beforeTransactionStart` subscriber that refuses a start (a quota, a
 * feature switch: it throws), met by a best-effort audit transaction begun inside an order's
 * `dataSource.transaction()` callback and caught by the app, makes the ORDER's commit fail
 * with TypeORM's `TransactionNotStartedError`: 500, nothing kept, every retry the same.
 * Without the library: 201, the order, its line and the shipment.
 *
 *   beforeTransactionStart() { if (quotaReached()) throw new Error('audit quota reached'); }
 *   // handler
 *   await dataSource.transaction(async (m) => {
 *     await m.query(INSERT order);
 *     await dataSource.transaction((a) => a.query(INSERT audit)).catch(log);  // best effort
 *     await m.query(INSERT line);
 *   });
 *
 * Why: TypeORM's `PostgresQueryRunner.startTransaction` sets `this.isTransactionActive = true`,
 * broadcasts `BeforeTransactionStart`, and on its error sets `this.isTransactionActive =
 * false`. Under the library `this` is a view of the request's one runner (`runnerView`,
 * lib/data-layers/runner-view.ts), whose `set` trap writes every property but `manager`
 * through to that runner: the failed start marks the request's shared runner as having no
 * transaction, while the request's and the order's are open. The order's
 * `commitTransaction` (TypeORM's own `commit`, called by `commitFrom` in
 * lib/data-layers/lazy-transaction.ts) then throws `TransactionNotStartedError`, its rollback
 * too (swallowed by `transaction()`). `failedStartAt` covers the failed start's own rollback,
 * but nothing puts `isTransactionActive` back (`ensureRunner` sets it once). A start that is
 * refused at the request's top level (the "after" control) is healed by the next start, which
 * sets it true again.
 *
 * Expected (docs/guides/transactions.md): "`manager.transaction()`, a query runner's
 * `startTransaction()`/`commitTransaction()`/`rollbackTransaction()` ... make savepoints of
 * it", and "So does TypeORM's `dataSource.transaction()` begun inside another's callback
 * (not through the callback's `manager`, which nests as without the library)": the inner
 * transaction is the app's own, a failure of its start is its own.
 *
 * Control: the same app without `@Idempotent()` (201, the rows, the audit's error logged), and
 * the keyed app whose refused audit starts after the order committed (201, the rows).
 *
 * Severity: medium (a false 500 for correct usage, deterministic, every retry the same;
 * nothing wrong committed).
 *
 * Fails now: `toEqual({ status: 201, ..., rows: ['line', 'order', 'shipment'] })` receives
 * `{ status: 500, handler: 'TransactionNotStartedError: Transaction is not started yet, start
 * transaction before committing or rolling it back.', rows: [] }`. The three controls pass.
 *
 * Suggested fix: keep `isTransactionActive` the library's: have the view's `set` trap (or
 * `startFrom`'s `finally`) put `isTransactionActive = true` back on the request's runner
 * while the request's transaction is open, whatever TypeORM's failed start wrote.
 *
 * Fixed: `startNow` (lib/data-layers/lazy-transaction.ts) puts the runner's
 * `isTransactionActive` back as it was when TypeORM's start fails (TypeORM's start runs on the
 * runner itself, so a `set` trap of the view would not see it).
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
  type TransactionStartEvent,
} from 'typeorm';
import { Idempotent } from '../../../lib/index.js';
import { startTypeormApp, type TypeormApp } from '../../support/typeorm-app.js';

type Body76 = { tag: string; mode: 'inside' | 'after' };

/** Set by the handler: the next transaction start is refused by the subscriber. */
let refuseNext = false;
const met = new Map<string, string>();

@EventSubscriber()
class QuotaSubscriber implements EntitySubscriberInterface {
  beforeTransactionStart(_event: TransactionStartEvent) {
    if (!refuseNext) return;
    refuseNext = false;
    throw new Error('audit quota reached');
  }
}

@Injectable()
class OrderService {
  constructor(@InjectDataSource() private readonly dataSource: DataSource) {}

  private insert(manager: EntityManager | DataSource, tag: string, what: string) {
    return manager.query(`INSERT INTO adv76_rows (tag, what) VALUES ($1, $2)`, [tag, what]);
  }

  /** An audit of its own, best effort: its failure is logged, never the order's. */
  private async audit(tag: string) {
    refuseNext = true;
    await this.dataSource
      .transaction(async (manager: EntityManager) => this.insert(manager, tag, 'audit'))
      .catch((error: unknown) => met.set(`${tag}-audit`, String(error)));
  }

  async run(body: Body76) {
    try {
      await this.dataSource.transaction(async (manager: EntityManager) => {
        await this.insert(manager, body.tag, 'order');
        if (body.mode === 'inside') await this.audit(body.tag);
        await this.insert(manager, body.tag, 'line');
      });
      if (body.mode === 'after') await this.audit(body.tag);
      await this.dataSource.transaction(async (manager: EntityManager) => {
        await this.insert(manager, body.tag, 'shipment');
      });
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

describe('adversary 76: TypeORM, a beforeTransactionStart subscriber refuses a start', () => {
  let fixture: TypeormApp;
  let admin: Client;
  let app: INestApplication;

  beforeAll(async () => {
    fixture = await startTypeormApp('adv76_orm_start_refused', {
      controllers: [OrderController],
      providers: [OrderService],
      subscribers: [QuotaSubscriber],
      max: 6,
      setup: async (admin) => {
        await admin.query(
          'CREATE TABLE adv76_rows (id serial PRIMARY KEY, tag text NOT NULL, what text NOT NULL)',
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
        'SELECT what FROM adv76_rows WHERE tag = $1 ORDER BY what',
        [tag],
      )
    ).rows.map((row) => row.what);

  const outcome = async (path: string, key: string | undefined, body: Body76) => {
    const call = request(app.getHttpServer()).post(path);
    if (key) call.set('Idempotency-Key', key);
    const answer = await call.send(body);
    return {
      status: answer.status,
      error: answer.status === 201 ? '' : answer.text,
      handler: met.get(body.tag) ?? '',
      audit: met.get(`${body.tag}-audit`) ?? '',
      rows: await kept(body.tag),
    };
  };

  const expected = {
    status: 201,
    error: '',
    handler: '',
    audit: 'Error: audit quota reached',
    rows: ['line', 'order', 'shipment'],
  };

  it('control: without @Idempotent(), refused inside: 201, the order', async () => {
    expect(await outcome('/plain', undefined, { tag: 'p1', mode: 'inside' })).toEqual(expected);
  }, 30_000);

  it('control: without @Idempotent(), refused after: 201, the order', async () => {
    expect(await outcome('/plain', undefined, { tag: 'p2', mode: 'after' })).toEqual(expected);
  }, 30_000);

  it('control: keyed, refused after the order: 201, the order', async () => {
    expect(await outcome('/keyed', 'k2', { tag: 'k2', mode: 'after' })).toEqual(expected);
  }, 30_000);

  it('keyed, refused inside: 201, the order', async () => {
    expect(await outcome('/keyed', 'k1', { tag: 'k1', mode: 'inside' })).toEqual(expected);
  }, 30_000);
});
