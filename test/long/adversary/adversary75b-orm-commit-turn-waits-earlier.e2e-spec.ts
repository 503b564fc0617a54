/**
 * Adversary 75b: on TypeORM, a `beforeTransactionCommit` subscriber that awaits a transaction
 * the request began earlier (a memoized "ensure the tenant row" the handler started and the
 * subscriber makes sure of before any commit) hangs the keyed request: no answer, the key held
 * (its lease renewed) and the connection idle in transaction, for as long as the process
 * lives. Without the library: 201 at once, both rows.
 *
 *   @EventSubscriber()
 *   class EnsureTenant implements EntitySubscriberInterface {
 *     async beforeTransactionCommit(event: TransactionCommitEvent) {
 *       if (tenants.ensuring && event.queryRunner !== tenants.runner) await tenants.ensuring;
 *     }
 *   }
 *   tenants.ensuring = dataSource.transaction(async (m) => {    // begun first
 *     await m.query('INSERT … tenant');
 *     await orderStarted; await m.query('SELECT count(*) …');    // reads it back
 *   });
 *   await dataSource.transaction(async (m) => {                  // the order, begun beside it
 *     orderStarted.resolve(); await m.query('INSERT … order');
 *   });                                                          // its commit awaits the tenant's
 *
 * Why: `LazyTransaction.inTurn` (lib/data-layers/lazy-transaction.ts, commits 72c048a and
 * 214a1fb) runs every nested start, commit and rollback one at a time, and runs at once only
 * what is asked from inside the turn under way (told by an AsyncLocalStorage store). The
 * order's commit turn runs its `beforeTransactionCommit` subscribers (`asOwner` → TypeORM's
 * `commitTransaction`), which await the tenant's transaction; the tenant's
 * `commitTransaction()` is asked from the handler's code (outside the turn), so it is queued
 * behind the order's commit turn, which waits for it: a deadlock. Taken on arrival, the
 * tenant's commit would be put off (`commitLater`: the order's transaction, begun after it, is
 * open) and resolve at once, sending nothing; the queue stands in front of that.
 *
 * Expected (docs/guides/transactions.md, two nested transactions at once): "The first to
 * commit while the other, begun after it through another query runner, is still open commits
 * at once for its code, as without the library". Here it never commits, and the request never
 * answers: a hang that holds the key.
 *
 * Control: the same route without `@Idempotent()` (201, both rows), and the same keyed route
 * with the tenant's transaction awaited before the order's begins (201, both rows).
 *
 * Severity: high (a hang: the key held with its lease renewed, every retry 409, a connection
 * idle in transaction; the shape, a commit-time subscriber awaiting earlier work of the same
 * request, is specific).
 *
 * Fails now: the keyed request is not answered within 6 s: `expect(answer).toBe('201')`:
 * Received: "Timeout of 6000ms exceeded"; a retry meanwhile answers 409. The two controls
 * pass. (The test then lets the subscriber go, so the request ends and the app closes.)
 *
 * Suggested fix: a commit (or rollback) that would be put off (`commitLater`: another
 * transaction begun after it is open) need not wait its turn at all: it sends nothing, so
 * decide it on arrival (before `inTurn`) and resolve at once, as the docs promise; more
 * generally, never queue behind a turn that is itself awaiting app code (subscribers) without
 * a way out: run a commit's subscribers outside the turn, or let a turn blocked in a
 * subscriber admit the ends of other transactions that send nothing.
 *
 * Fixed: a commit that is put off (`NestedIdentity.commitLater`: another transaction begun
 * after it is open) is decided on arrival, before the turn queue, in
 * `LazyTransaction.ensureRunner` (`commitInTurn`): it sends nothing and resolves at once, and
 * the later transaction's end releases it (`releaseCommitted`).
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

type Body75f = { tag: string; serial?: boolean };

function signal() {
  let resolve!: () => void;
  const promise = new Promise<void>((done) => (resolve = done));
  return { promise, resolve };
}

/** The tenant being ensured (and through which runner), shared by the handler and subscriber. */
const tenants: { ensuring?: Promise<unknown>; runner?: unknown } = {};
/** Lets a stuck subscriber go once the test has seen the hang (a clean close). */
let letGo = signal();

@EventSubscriber()
class EnsureTenantSubscriber implements EntitySubscriberInterface {
  async beforeTransactionCommit(event: TransactionCommitEvent) {
    if (tenants.ensuring && event.queryRunner !== tenants.runner) {
      await Promise.race([tenants.ensuring, letGo.promise]);
    }
  }
}

@Injectable()
class OrderService {
  constructor(@InjectDataSource() private readonly dataSource: DataSource) {}

  async run(body: Body75f) {
    const { tag } = body;
    const orderStarted = signal();
    const ensuring = this.dataSource.transaction(async (manager: EntityManager) => {
      tenants.runner = manager.queryRunner;
      await manager.query(`INSERT INTO adv75f_rows (tag, what) VALUES ($1, 'tenant')`, [tag]);
      if (!body.serial) await orderStarted.promise;
      await manager.query(`SELECT count(*) FROM adv75f_rows WHERE tag = $1`, [tag]);
    });
    tenants.ensuring = ensuring;
    try {
      if (body.serial) await ensuring;
      await this.dataSource.transaction(async (manager: EntityManager) => {
        orderStarted.resolve();
        await manager.query(`INSERT INTO adv75f_rows (tag, what) VALUES ($1, 'order')`, [tag]);
      });
      await ensuring;
    } finally {
      tenants.ensuring = undefined;
      tenants.runner = undefined;
    }
    return { tag };
  }
}

@Controller()
class OrderController {
  constructor(private readonly service: OrderService) {}

  @Post('keyed')
  @Idempotent()
  keyed(@Body() body: Body75f) {
    return this.service.run(body);
  }

  @Post('plain')
  plain(@Body() body: Body75f) {
    return this.service.run(body);
  }
}

describe("adversary 75b: TypeORM, a commit's subscriber awaits a transaction begun before it", () => {
  let fixture: TypeormApp;
  let admin: Client;
  let app: INestApplication;

  beforeAll(async () => {
    fixture = await startTypeormApp('adv75b_orm_commit_turn_waits', {
      controllers: [OrderController],
      providers: [OrderService],
      subscribers: [EnsureTenantSubscriber],
      max: 6,
      setup: async (admin) => {
        await admin.query(
          'CREATE TABLE adv75f_rows (id serial PRIMARY KEY, tag text NOT NULL, what text NOT NULL)',
        );
      },
    });
    ({ admin, app } = fixture);
  }, 60_000);

  afterAll(async () => {
    letGo.resolve();
    await fixture?.close();
  });

  const kept = async (tag: string) =>
    (
      await admin.query<{ what: string }>(
        'SELECT what FROM adv75f_rows WHERE tag = $1 ORDER BY what',
        [tag],
      )
    ).rows.map((row) => row.what);

  const post = (path: string, key: string | undefined, body: Body75f, timeoutMs = 6000) => {
    const call = request(app.getHttpServer()).post(path).timeout(timeoutMs);
    if (key) call.set('Idempotency-Key', key);
    return call.send(body).then(
      (answer) => ({ outcome: String(answer.status), status: answer.status }),
      (error: Error) => ({ outcome: error.message, status: 0 }),
    );
  };

  it('control: without @Idempotent(): 201 at once, both rows', async () => {
    expect((await post('/plain', undefined, { tag: 'p1' })).outcome).toBe('201');
    expect(await kept('p1')).toEqual(['order', 'tenant']);
  }, 20_000);

  it("control: keyed, the tenant's transaction awaited before the order's: 201, both rows", async () => {
    expect((await post('/keyed', 'k0', { tag: 'k0', serial: true })).outcome).toBe('201');
    expect(await kept('k0')).toEqual(['order', 'tenant']);
  }, 20_000);

  it('keyed, the two begun together: answered (201, both rows), not a hang', async () => {
    letGo = signal();
    const answer = await post('/keyed', 'k1', { tag: 'k1' });
    const retry = answer.status === 0 ? await post('/keyed', 'k1', { tag: 'k1' }, 3000) : answer;
    letGo.resolve();
    expect(`${answer.outcome} (retry meanwhile: ${retry.outcome})`).toBe(
      '201 (retry meanwhile: 201)',
    );
    expect(await kept('k1')).toEqual(['order', 'tenant']);
  }, 30_000);
});
