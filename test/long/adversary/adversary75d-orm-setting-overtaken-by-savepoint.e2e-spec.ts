/**
 * Adversary 75d: on TypeORM, inside a `dataSource.transaction()`, a setting made for the
 * transaction (`set_config('app.tenant', …, true)`) together with an optional step in a
 * savepoint of its own (`manager.transaction(...)`, its failure rolled back alone) is lost
 * under `@Idempotent()`: the savepoint's `SAVEPOINT` overtakes the setting, the setting lands
 * inside the savepoint, and the savepoint's rollback undoes it. The order row written after it
 * takes its tenant from the setting (a column default, as a trigger or row-level-security
 * check would): it commits with an empty tenant under a stored 201, replayed as such. Without the
 * library: tenant 't1'.
 *
 *   await dataSource.transaction(async (m) => {
 *     await Promise.all([
 *       m.query(`SELECT set_config('app.tenant', $1, true)`, [tenant]),
 *       m.transaction(async (inner) => {                 // the optional coupon, alone
 *         await inner.query('INSERT INTO coupons …');
 *         throw new CouponExpired();                     // rolled back to its savepoint
 *       }).catch(() => undefined),
 *     ]);
 *     await m.query('INSERT INTO orders (what) VALUES ($1)', [what]); // tenant DEFAULT app.tenant
 *   });
 *
 * Why: commit 1ac2b91 (`SendOrder`, lib/data-layers/send-order.ts) sends a view's statements
 * in the order called, but only those through its `query()` (`queryFrom` in
 * `LazyTransaction.ensureRunner`) and its node-postgres client (`clientOf`). The set_config
 * waits there for its preparation, a round trip (`keepSettings` → `NestedCommit.before` reads
 * the setting's value first). The same view's `startTransaction()` (`startFrom` → `inTurn` →
 * `startNow` → TypeORM's `startTransaction`, whose `SAVEPOINT typeorm_2` goes through
 * `queryFrom` with `from === runner`, outside the `SendOrder`) does not wait for it: the
 * SAVEPOINT is sent first, the set_config inside the savepoint, and `ROLLBACK TO SAVEPOINT
 * typeorm_2` undoes it. node-postgres, without the library, sends them in the order called
 * (set_config, SAVEPOINT, …): the setting is made before the savepoint and survives it.
 *
 * Expected (docs/guides/transactions.md): a nested transaction is a savepoint on the request's
 * connection, "their starts, commits and rollbacks run one at a time, in the order asked", and
 * commit 1ac2b91's own words: "a view's statements are sent in the order called". Correct code
 * must commit the same effect as without the library.
 *
 * Control: the same route without `@Idempotent()` (201, tenant 't1'), and the same keyed route
 * with the set_config awaited before the savepoint starts (201, tenant 't1').
 *
 * Severity: high (a wrong effect committed under a stored success: the order written for no
 * tenant, or with row-level security, refused/under another; deterministic, replayed).
 *
 * Fails now: `expect(...).toEqual({ status: 201, replayed: true, orders: 1, tenant: 't1',
 * coupons: 0 })`: Received `tenant: ""` (the setting rolled back with the savepoint; '' as a
 * custom setting once made on the connection reads), the rest as expected: the order committed
 * without its tenant under a stored 201 that the retry replays. The two controls pass.
 *
 * Suggested fix: put a view's transaction control (its `startTransaction()`, commit and
 * rollback, whose SAVEPOINT/RELEASE/ROLLBACK TO go through the runner) in the same
 * `SendOrder` as its statements: a start waits until what the view called before it was sent.
 *
 * Fixed: a view's nested start, commit and rollback take their place in its `SendOrder` before
 * their turn (`LazyTransaction.inOrder`, used by `startFrom`, `commitInTurn` and `rollbackInTurn`
 * in lib/data-layers/lazy-transaction.ts): the SAVEPOINT waits until the set_config called before
 * it is sent. A view's stream (`streamFrom`) takes its place there too.
 */
import { Body, Controller, type INestApplication, Injectable, Post } from '@nestjs/common';
import { InjectDataSource } from '@nestjs/typeorm';
import { type Client } from 'pg';
import request from 'supertest';
import { DataSource, type EntityManager } from 'typeorm';
import { Idempotent } from '../../../lib/index.js';
import { startTypeormApp, type TypeormApp } from '../../support/typeorm-app.js';

type Body75d = { what: string; serial?: boolean };

class CouponExpired extends Error {}

@Injectable()
class OrderService {
  constructor(@InjectDataSource() private readonly dataSource: DataSource) {}

  run(body: Body75d) {
    return this.dataSource.transaction(async (manager: EntityManager) => {
      const setTenant = () => manager.query(`SELECT set_config('app.tenant', $1, true)`, ['t1']);
      const coupon = () =>
        manager
          .transaction(async (inner: EntityManager) => {
            await inner.query(`INSERT INTO adv75d_coupons (what) VALUES ($1)`, [body.what]);
            throw new CouponExpired('the coupon expired');
          })
          .catch((error: unknown) => {
            if (!(error instanceof CouponExpired)) throw error;
          });
      if (body.serial) {
        await setTenant();
        await coupon();
      } else {
        await Promise.all([setTenant(), coupon()]);
      }
      await manager.query(`INSERT INTO adv75d_orders (what) VALUES ($1)`, [body.what]);
      return { what: body.what };
    });
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

describe("adversary 75d: TypeORM, a view's SAVEPOINT overtakes its set_config", () => {
  let fixture: TypeormApp;
  let admin: Client;
  let app: INestApplication;

  beforeAll(async () => {
    fixture = await startTypeormApp('adv75d_orm_setting_overtaken', {
      controllers: [OrderController],
      providers: [OrderService],
      setup: async (admin) => {
        await admin.query(`
          CREATE TABLE adv75d_orders (id serial PRIMARY KEY, what text NOT NULL,
            tenant text DEFAULT current_setting('app.tenant', true));
          CREATE TABLE adv75d_coupons (id serial PRIMARY KEY, what text NOT NULL);`);
      },
    });
    ({ admin, app } = fixture);
  }, 60_000);

  afterAll(async () => {
    await fixture?.close();
  });

  const kept = async (what: string) => {
    const orders = await admin.query<{ tenant: string | null }>(
      'SELECT tenant FROM adv75d_orders WHERE what = $1',
      [what],
    );
    const coupons = await admin.query('SELECT 1 FROM adv75d_coupons WHERE what = $1', [what]);
    return {
      orders: orders.rows.length,
      tenant: orders.rows[0]?.tenant,
      coupons: coupons.rows.length,
    };
  };

  const send = (path: string, key: string | undefined, body: Body75d) => {
    const call = request(app.getHttpServer()).post(path);
    if (key) call.set('Idempotency-Key', key);
    return call.send(body);
  };

  it("control: without @Idempotent(): 201, the order's tenant 't1'", async () => {
    const answer = await send('/plain', undefined, { what: 'p1' });
    expect({ status: answer.status, ...(await kept('p1')) }).toEqual({
      status: 201,
      orders: 1,
      tenant: 't1',
      coupons: 0,
    });
  });

  it("control: keyed, the setting awaited before the savepoint: 201, tenant 't1'", async () => {
    const answer = await send('/keyed', 'k0', { what: 'k0', serial: true });
    expect({ status: answer.status, ...(await kept('k0')) }).toEqual({
      status: 201,
      orders: 1,
      tenant: 't1',
      coupons: 0,
    });
  });

  it("keyed, the setting and the savepoint together: 201, tenant 't1' (as without the library)", async () => {
    const answer = await send('/keyed', 'k1', { what: 'k1' });
    const replay = await send('/keyed', 'k1', { what: 'k1' });
    expect({
      status: answer.status,
      replayed: replay.status === 201 && replay.text === answer.text,
      ...(await kept('k1')),
    }).toEqual({
      status: 201,
      replayed: true,
      orders: 1,
      tenant: 't1',
      coupons: 0,
    });
  });
});
