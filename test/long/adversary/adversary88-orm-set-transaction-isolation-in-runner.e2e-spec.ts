/**
 * Adversary 88 (orm): TypeORM's manual-transaction recipe with the level set in SQL, as the
 * first statement of the runner's transaction (`qr.startTransaction()` then
 * `qr.query('SET TRANSACTION ISOLATION LEVEL SERIALIZABLE')`), as the handler's first
 * database work. Without the library the runner's `START TRANSACTION` is followed by the
 * `SET`, and the transaction runs SERIALIZABLE: 201. Under `@Idempotent()` the runner's
 * transaction is a savepoint of the request's, and the `SET` reaches PostgreSQL as it is,
 * which refuses it ("SET TRANSACTION ISOLATION LEVEL must be called before any query",
 * 25001): the request answers 500 on every try, the 500 stored and replayed. The same level
 * passed to `qr.startTransaction('SERIALIZABLE')` works (the request's transaction begins at
 * it), and on the pool seam the same `SET` sent on a view inside its nested transaction is
 * read as that transaction's level (Drizzle's `db.transaction(…, { isolationLevel })` sends
 * exactly `begin` then `set transaction isolation level …`).
 *
 * User code:
 *
 *   const qr = this.dataSource.createQueryRunner();
 *   await qr.connect();
 *   await qr.startTransaction();
 *   try {
 *     await qr.query('SET TRANSACTION ISOLATION LEVEL SERIALIZABLE');
 *     await qr.manager.insert(Order, { tag });
 *     await qr.commitTransaction();
 *   } catch (e) { await qr.rollbackTransaction(); throw e; } finally { await qr.release(); }
 *
 * Code path: lib/data-layers/lazy-transaction.ts `queryFrom` → `judge`: a transaction's mode
 * alone is sent apart only outside any transaction of its code (`depth <= 1 &&
 * isTransactionModeOnly`); inside the runner's own transaction it is sent as any statement.
 * No `nestedControlOf(text)` 'set-isolation' case on the TypeORM seam, where
 * lib/data-layers/pool-transaction.ts `onView` answers it with `askIsolation(level)` and an
 * empty `SET` result.
 *
 * Docs quote: docs/guides/transactions.md, "Code in the request may nest the transaction,
 * never end it. `manager.transaction()`, a query runner's `startTransaction()`/… make
 * savepoints of it"; "A nested transaction that asks for a level (…) as the handler's first
 * database work begins the request's transaction at that level"; "so does a `SET
 * TRANSACTION ISOLATION LEVEL` sent as the first statement through the pool (…), answered as
 * a `SET`"; the guide's opening: nothing in the handler changes.
 *
 * Severity: medium (a handler that works without the library answers 500 on every retry,
 * with PostgreSQL's error, which names no cause the app can act on; nothing committed twice).
 *
 * Failed before the change (verified unskipped): 500, 500 (the handler caught QueryFailedError "SET
 * TRANSACTION ISOLATION LEVEL must be called before any query"), no row; expected 201, 201,
 * one row, level 'serializable'. Controls pass: the same code without `@Idempotent()` (201,
 * serializable), and keyed with `qr.startTransaction('SERIALIZABLE')` (201, serializable).
 *
 * Suggested fix: in the TypeORM seam's `judge`/`queryFrom`, read `nestedControlOf(text)`: a
 * `set-isolation` as the first statement of its code's outermost transaction (nothing of its
 * own sent since its `startTransaction()`) is that transaction's level (`askIsolation`, as
 * `startNow` does for `startTransaction(level)`), answered as a `SET`; nested deeper, ignored
 * as TypeORM ignores a nested level (or refused clearly with `IsolationLevelRefusedError`).
 *
 * Changed (lead, session of 2026-12-06, third): the request's transaction has begun by the
 * time the SET arrives (the library keeps the session's state and TypeORM sends its SAVEPOINT
 * at `startTransaction()`), and PostgreSQL cannot raise a begun transaction's level. The SET
 * is now asked as that transaction's level (`levelSetInSql` in lib/data-layers/
 * lazy-transaction.ts): answered as a `SET` where the request runs at that level or above (the
 * route's `isolationLevel`: the new case), else refused before it is sent with
 * `IsolationLevelRefusedError` naming `startTransaction('SERIALIZABLE')` and the route option,
 * where PostgreSQL's 25001 named no cause. Route to make it run as without the library: a
 * savepoint begun at the runner's first statement, not at its `startTransaction()`.
 */
import { Body, Controller, type INestApplication, Injectable, Post } from '@nestjs/common';
import { InjectDataSource } from '@nestjs/typeorm';
import request from 'supertest';
import { Column, DataSource, Entity, PrimaryGeneratedColumn } from 'typeorm';
import { Idempotent } from '../../../lib/index.js';
import { startTypeormApp, type TypeormApp } from '../../support/typeorm-app.js';

@Entity({ name: 'adv88_set_iso_orders', synchronize: false })
class Order {
  @PrimaryGeneratedColumn()
  id!: number;

  @Column({ type: 'text' })
  tag!: string;
}

/** What the service caught, as the app would log it. */
const caught: string[] = [];

@Injectable()
class OrderService {
  constructor(@InjectDataSource() private readonly dataSource: DataSource) {}

  async place(tag: string, levelInSql: boolean) {
    const qr = this.dataSource.createQueryRunner();
    await qr.connect();
    await (levelInSql ? qr.startTransaction() : qr.startTransaction('SERIALIZABLE'));
    try {
      if (levelInSql) await qr.query('SET TRANSACTION ISOLATION LEVEL SERIALIZABLE');
      await qr.manager.insert(Order, { tag });
      const [{ level }] = (await qr.query(
        `SELECT current_setting('transaction_isolation') AS level`,
      )) as { level: string }[];
      await qr.commitTransaction();
      return { tag, level };
    } catch (error) {
      caught.push(`${(error as Error).name}: ${(error as Error).message}`);
      await qr.rollbackTransaction();
      throw error;
    } finally {
      await qr.release();
    }
  }
}

@Controller()
class OrderController {
  constructor(private readonly orders: OrderService) {}

  @Post('plain')
  plain(@Body() body: { tag: string }) {
    return this.orders.place(body.tag, true);
  }

  @Post('idem')
  @Idempotent()
  idem(@Body() body: { tag: string }) {
    return this.orders.place(body.tag, true);
  }

  @Post('idem-on-route')
  @Idempotent({ isolationLevel: 'SERIALIZABLE' })
  idemOnRoute(@Body() body: { tag: string }) {
    return this.orders.place(body.tag, true);
  }

  @Post('idem-start-level')
  @Idempotent()
  idemStartLevel(@Body() body: { tag: string }) {
    return this.orders.place(body.tag, false);
  }
}

describe('adversary 88 orm: SET TRANSACTION ISOLATION LEVEL first in a query runner’s transaction', () => {
  let fixture: TypeormApp;
  let app: INestApplication;

  beforeAll(async () => {
    fixture = await startTypeormApp('adv88_orm_set_isolation', {
      controllers: [OrderController],
      providers: [OrderService],
      entities: [Order],
      max: 6,
      setup: async (admin) => {
        await admin.query(
          'CREATE TABLE adv88_set_iso_orders (id serial PRIMARY KEY, tag text NOT NULL)',
        );
      },
    });
    ({ app } = fixture);
  }, 60_000);

  afterAll(async () => {
    await fixture?.close();
  });

  async function scenario(
    route: 'plain' | 'idem' | 'idem-on-route' | 'idem-start-level',
    tag: string,
  ) {
    const post = () =>
      request(app.getHttpServer()).post(`/${route}`).set('Idempotency-Key', `key-${tag}`).send({
        tag,
      });
    const first = await post();
    const second = route === 'plain' ? first : await post();
    const { rows } = await fixture.admin.query<{ tag: string }>(
      'SELECT tag FROM adv88_set_iso_orders WHERE tag = $1',
      [tag],
    );
    return {
      statuses: [first.status, second.status],
      level: (first.body as { level?: string }).level,
      rows: rows.length,
    };
  }

  it('control: without @Idempotent(), the SET makes the runner’s transaction SERIALIZABLE: 201', async () => {
    expect(await scenario('plain', 'c1')).toEqual({
      statuses: [201, 201],
      level: 'serializable',
      rows: 1,
    });
  }, 30_000);

  it('control: keyed, the level passed to startTransaction(): 201 at SERIALIZABLE, replayed', async () => {
    expect(await scenario('idem-start-level', 'c2')).toEqual({
      statuses: [201, 201],
      level: 'serializable',
      rows: 1,
    });
  }, 30_000);

  it('keyed, the route at SERIALIZABLE: the SET joins it: 201 at SERIALIZABLE, replayed', async () => {
    expect(await scenario('idem-on-route', 'r1')).toEqual({
      statuses: [201, 201],
      level: 'serializable',
      rows: 1,
    });
  }, 30_000);

  it('keyed, the level set in SQL after the runner’s transaction began: refused, saying what to write instead', async () => {
    caught.length = 0;
    expect(await scenario('idem', 'i1')).toEqual({
      statuses: [500, 500],
      level: undefined,
      rows: 0,
    });
    expect(caught).toHaveLength(1);
    expect(caught[0]).toMatch(
      /^IsolationLevelRefusedError: isolation level refused: SET TRANSACTION/,
    );
    expect(caught[0]).toContain("queryRunner.startTransaction('SERIALIZABLE')");
    expect(caught[0]).toContain("@Idempotent({ isolationLevel: 'SERIALIZABLE' })");
  }, 30_000);
});
