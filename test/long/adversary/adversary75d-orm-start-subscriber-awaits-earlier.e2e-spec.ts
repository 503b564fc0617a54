/**
 * Adversary 75d: on TypeORM, a `beforeTransactionStart` subscriber that holds back every other
 * transaction of the request until the one ensuring the tenant has ended (a memoized "ensure
 * the tenant row" the handler started first, the shape of 75b's commit subscriber, one event
 * earlier) hangs the keyed request: no answer, the key held (its lease renewed), every retry
 * 409, the connection idle in transaction. Without the library: 201 at once, both rows.
 *
 *   @EventSubscriber()
 *   class EnsureTenant implements EntitySubscriberInterface {
 *     async beforeTransactionStart(event: TransactionStartEvent) {
 *       if (tenants.ensuring && event.queryRunner !== tenants.runner) await tenants.ensuring;
 *     }
 *   }
 *   tenants.runner = dataSource.createQueryRunner();
 *   tenants.ensuring = tenants.runner.manager.transaction(async (m) => {   // begun first
 *     await m.query('INSERT … tenant');
 *   });
 *   await dataSource.transaction(async (m) => {            // its start waits for the tenant's end
 *     await m.query('INSERT … order');
 *   });
 *
 * Why: `LazyTransaction.inTurn` (lib/data-layers/lazy-transaction.ts) runs every nested start,
 * commit and rollback on a `TurnQueue` (lib/data-layers/turn-queue.ts). The order's start turn
 * (`startFrom` → `startNow` → `asOwner` → TypeORM's `startTransaction`) runs its
 * `beforeTransactionStart` subscribers, which await the tenant's transaction; the tenant's
 * `commitTransaction()` is asked from the handler's code (outside that turn's store), and is
 * not put off (`commitInTurn` decides on arrival only a commit with a transaction begun after
 * it open: the order's is not begun yet, `NestedIdentity.started` runs at its
 * `afterTransactionStart`), so it queues behind the start turn that waits for it: a deadlock.
 * Commit aa3dbc1 fixed this for a `beforeTransactionCommit` subscriber only.
 *
 * Expected (docs/guides/transactions.md, two nested transactions at once): "their starts,
 * commits and rollbacks run one at a time, in the order asked"; nothing says a subscriber of
 * one may not wait for another's end, and without the library it works. Here the request
 * never answers: a hang that holds the key.
 *
 * Control: the same route without `@Idempotent()` (201, both rows), and the same keyed route
 * with the tenant's transaction awaited before the order's begins (201, both rows).
 *
 * Severity: high (a hang: the key held with its lease renewed, every retry 409, a connection
 * idle in transaction).
 *
 * Fails now: `expect(...).toBe('201 (retry meanwhile: 201)')`: Received: "Timeout of 6000ms
 * exceeded (retry meanwhile: 409)". The two controls pass. (The test then lets the subscriber
 * go, so the request ends and the app closes.)
 *
 * Suggested fix: do not run app code (the start's, commit's and rollback's subscribers) while
 * holding the turn, or let the ends of other transactions that the turn's subscribers may be
 * awaiting through: e.g. note the start's owner as begun before broadcasting
 * `beforeTransactionStart` (so that an earlier transaction's commit is put off on arrival), and
 * decide a rollback that is refused on arrival too.
 *
 * Fixed: a start holds the turn as `startingFor` (`startFrom`,
 * lib/data-layers/lazy-transaction.ts); an earlier transaction's end asked from outside that turn
 * is decided on arrival (`endsOnArrival`): its commit put off (`commitLater`, released when the
 * new one ends, or at the start turn's end if that start failed: `releaseCommitted`), its rollback
 * refused. `TurnQueue` bounds any other such wait (`NestedTurnTimeoutError`).
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

type Body75d = { tag: string; serial?: boolean };

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
  async beforeTransactionStart(event: TransactionStartEvent) {
    if (tenants.ensuring && event.queryRunner !== tenants.runner) {
      await Promise.race([tenants.ensuring, letGo.promise]);
    }
  }
}

@Injectable()
class OrderService {
  constructor(@InjectDataSource() private readonly dataSource: DataSource) {}

  async run(body: Body75d) {
    const { tag } = body;
    const runner = this.dataSource.createQueryRunner();
    tenants.runner = runner;
    const ensuring = runner.manager
      .transaction(async (manager: EntityManager) => {
        await manager.query(`INSERT INTO adv75d_rows (tag, what) VALUES ($1, 'tenant')`, [tag]);
      })
      .finally(() => runner.release());
    tenants.ensuring = ensuring;
    try {
      if (body.serial) await ensuring;
      await this.dataSource.transaction(async (manager: EntityManager) => {
        await manager.query(`INSERT INTO adv75d_rows (tag, what) VALUES ($1, 'order')`, [tag]);
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
  keyed(@Body() body: Body75d) {
    return this.service.run(body);
  }

  @Post('plain')
  plain(@Body() body: Body75d) {
    return this.service.run(body);
  }
}

describe("adversary 75d: TypeORM, a start's subscriber awaits a transaction begun before it", () => {
  let fixture: TypeormApp;
  let admin: Client;
  let app: INestApplication;

  beforeAll(async () => {
    fixture = await startTypeormApp('adv75d_orm_start_waits', {
      controllers: [OrderController],
      providers: [OrderService],
      subscribers: [EnsureTenantSubscriber],
      max: 6,
      setup: async (admin) => {
        await admin.query(
          'CREATE TABLE adv75d_rows (id serial PRIMARY KEY, tag text NOT NULL, what text NOT NULL)',
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
        'SELECT what FROM adv75d_rows WHERE tag = $1 ORDER BY what',
        [tag],
      )
    ).rows.map((row) => row.what);

  const post = (path: string, key: string | undefined, body: Body75d, timeoutMs = 6000) => {
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
