/**
 * Adversary 75d: on TypeORM, a `beforeTransactionCommit` subscriber that waits for a
 * transaction the request began earlier (the 75b "ensure the tenant" shape) still hangs the
 * keyed request when that earlier transaction ROLLS BACK instead of committing (its callback
 * throws: the tenant already exists, a validation fails). No answer, the key held (its lease
 * renewed), a retry 409, the connection idle in transaction. Without the library: 201 at
 * once, the order's row.
 *
 *   @EventSubscriber()
 *   class EnsureTenant implements EntitySubscriberInterface {
 *     async beforeTransactionCommit(event: TransactionCommitEvent) {
 *       if (tenants.ensuring && event.queryRunner !== tenants.runner)
 *         await tenants.ensuring.catch(() => undefined);      // settled, whichever way
 *     }
 *   }
 *   tenants.ensuring = dataSource.transaction(async (m) => {    // begun first
 *     await m.query('INSERT … tenant'); await orderStarted;
 *     await m.query('SELECT count(*) …');
 *     throw new TenantExists();                                  // rolled back
 *   });
 *   await dataSource.transaction(async (m) => {                  // the order, begun beside it
 *     orderStarted.resolve(); await m.query('INSERT … order');
 *   });                                                          // its commit awaits the tenant's
 *
 * Why: commit aa3dbc1 decides on arrival only a COMMIT that would be put off
 * (`commitInTurn` in `LazyTransaction.ensureRunner`, lib/data-layers/lazy-transaction.ts:
 * `ending(...) === 'not-innermost' && commitLater(...)`). The rollback of the same earlier
 * transaction goes through `rollbackInTurn`, which always queues in the `TurnQueue`
 * (lib/data-layers/turn-queue.ts): it is asked from the handler's code, outside the order's
 * commit turn (not `underWay` in its store), so it waits behind that turn, whose
 * `beforeTransactionCommit` subscriber waits for it: a deadlock. Its outcome needs no turn
 * either: `refuseOutOfOrder` refuses a rollback of a transaction that is not the innermost
 * (the docs' "refused") without sending anything.
 *
 * Expected (docs/guides/transactions.md, two nested transactions at once): "The first to roll
 * back while the other is open is refused (a refused rollback is swallowed by TypeORM's
 * `transaction()`, which rejects with the callback's own error, and the request answers 500
 * `transaction_aborted`)". Here it is never decided: the request never answers.
 *
 * Control: the same route without `@Idempotent()` (201, the order's row only), and the same
 * keyed route with the tenant's transaction awaited (and failed) before the order's begins
 * (201, the order's row).
 *
 * Severity: high (a hang: the key held with its lease renewed, every retry 409, a connection
 * idle in transaction, for as long as the process lives).
 *
 * Fails now: `expect(...).toBe('answered (retry meanwhile: answered)')`: Received:
 * "Timeout of 6000ms exceeded (retry meanwhile: 409)". The two controls pass. (The test then
 * lets the subscriber go, so the request ends and the app closes.)
 *
 * Suggested fix: decide a rollback of a transaction that is not the innermost on arrival too
 * (before `inTurn`), as `commitInTurn` does for a put-off commit: it is refused and sends
 * nothing. More generally, no end that sends nothing should queue behind a turn that runs app
 * code (subscribers).
 *
 * Fixed: a rollback of a nested transaction that is not the innermost (or asked while another's
 * start holds the turn) is refused on arrival, never queued: `rollbackInTurn` and `endsOnArrival`
 * in `LazyTransaction.ensureRunner` (lib/data-layers/lazy-transaction.ts). As a safety net,
 * `TurnQueue` (lib/data-layers/turn-queue.ts) gives up a wait longer than `timeoutMs` behind a
 * turn running app code (`NestedTurnTimeoutError`, 500 `transaction_aborted`).
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

type Body75d = { tag: string; serial?: boolean };

function signal() {
  let resolve!: () => void;
  const promise = new Promise<void>((done) => (resolve = done));
  return { promise, resolve };
}

class TenantExists extends Error {}

/** The tenant being ensured (and through which runner), shared by the handler and subscriber. */
const tenants: { ensuring?: Promise<unknown>; runner?: unknown } = {};
/** Lets a stuck subscriber go once the test has seen the hang (a clean close). */
let letGo = signal();

@EventSubscriber()
class EnsureTenantSubscriber implements EntitySubscriberInterface {
  async beforeTransactionCommit(event: TransactionCommitEvent) {
    if (tenants.ensuring && event.queryRunner !== tenants.runner) {
      await Promise.race([tenants.ensuring.catch(() => undefined), letGo.promise]);
    }
  }
}

@Injectable()
class OrderService {
  constructor(@InjectDataSource() private readonly dataSource: DataSource) {}

  async run(body: Body75d) {
    const { tag } = body;
    const orderStarted = signal();
    const ensuring = this.dataSource.transaction(async (manager: EntityManager) => {
      tenants.runner = manager.queryRunner;
      await manager.query(`INSERT INTO adv75d_rows (tag, what) VALUES ($1, 'tenant')`, [tag]);
      if (!body.serial) await orderStarted.promise;
      await manager.query(`SELECT count(*) FROM adv75d_rows WHERE tag = $1`, [tag]);
      throw new TenantExists('the tenant exists already');
    });
    tenants.ensuring = ensuring;
    const tenant = ensuring.then(
      () => 'created',
      (error: unknown) => (error instanceof TenantExists ? 'existed' : Promise.reject(error)),
    );
    try {
      if (body.serial) await tenant;
      await this.dataSource.transaction(async (manager: EntityManager) => {
        orderStarted.resolve();
        await manager.query(`INSERT INTO adv75d_rows (tag, what) VALUES ($1, 'order')`, [tag]);
      });
      return { tag, tenant: await tenant };
    } finally {
      tenants.ensuring = undefined;
      tenants.runner = undefined;
    }
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

describe("adversary 75d: TypeORM, a commit's subscriber awaits a transaction begun before it that rolls back", () => {
  let fixture: TypeormApp;
  let admin: Client;
  let app: INestApplication;

  beforeAll(async () => {
    fixture = await startTypeormApp('adv75d_orm_rollback_queued', {
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

  it("control: without @Idempotent(): 201 at once, the order's row", async () => {
    expect((await post('/plain', undefined, { tag: 'p1' })).outcome).toBe('201');
    expect(await kept('p1')).toEqual(['order']);
  }, 20_000);

  it("control: keyed, the tenant's transaction awaited before the order's: 201, the order's row", async () => {
    expect((await post('/keyed', 'k0', { tag: 'k0', serial: true })).outcome).toBe('201');
    expect(await kept('k0')).toEqual(['order']);
  }, 20_000);

  it('keyed, the two begun together: answered (the docs: 500 transaction_aborted), not a hang', async () => {
    letGo = signal();
    const answer = await post('/keyed', 'k1', { tag: 'k1' });
    const retry = answer.status === 0 ? await post('/keyed', 'k1', { tag: 'k1' }, 3000) : answer;
    letGo.resolve();
    const shown = (outcome: { status: number; outcome: string }) =>
      outcome.status === 0 || outcome.status === 409 ? outcome.outcome : 'answered';
    expect(`${shown(answer)} (retry meanwhile: ${shown(retry)})`).toBe(
      'answered (retry meanwhile: answered)',
    );
  }, 30_000);
});
