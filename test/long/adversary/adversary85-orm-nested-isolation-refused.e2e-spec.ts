/**
 * Adversary 85 (orm): a transaction of the code nested in another of its own (`manager.transaction()`
 * inside `dataSource.transaction()`'s callback, or `@Transactional({ propagation:
 * Propagation.Nested, isolationLevel })` under `@nestjs-cls/transactional`) that names an
 * isolation level is, in TypeORM, a plain `SAVEPOINT`: PostgresQueryRunner only sends the level
 * at depth 0, and ignores it for a savepoint (a level cannot change inside a transaction).
 * Under the library the level is weighed against the request's transaction as if it were the
 * code's outermost: the request's transaction already began (at READ COMMITTED, by the outer
 * transaction's SAVEPOINT), so the nested one is refused with `IsolationLevelRefusedError`,
 * and the request answers 500 on every try, where without the library it commits.
 *
 *   await dataSource.transaction(async (em) => {               // the order
 *     await em.save(Order, { tag: 'outer' });
 *     await em.transaction('SERIALIZABLE', async (inner) => {  // a service's own unit
 *       await inner.save(Order, { tag: 'inner' });
 *     });
 *   });
 *
 * Code path: lib/data-layers/lazy-transaction.ts `startNow` calls `this.askIsolation(level)`
 * for every `startTransaction(level)`, at any depth; lib/transaction/request-transaction.ts
 * `askIsolation` → `decideIsolation(level, { begun: true, current: 'READ COMMITTED' })` →
 * `refuse` → `IsolationLevelRefusedError`. TypeORM's own `startTransaction` at
 * `transactionDepth > 0` (node_modules/typeorm/driver/postgres/PostgresQueryRunner.js:130-137)
 * sends only `SAVEPOINT typeorm_N`.
 *
 * Docs: docs/guides/transactions.md "`manager.transaction()`, a query runner's
 * `startTransaction()`/… and `@Transactional()` (every `Propagation`) make savepoints of
 * it"; "A nested transaction that asks for a level … as the handler's first database work
 * begins the request's transaction at that level"; the promise: the same effects and errors
 * as without the library. (The refusal of a stronger level is right for the code's outermost
 * transaction, a `BEGIN … ISOLATION LEVEL` without the library; not for one nested in it.)
 *
 * Severity: high (a request that works without the library answers 500 on every retry; the
 * handler cannot be made to pass without changing its code).
 *
 * `@nestjs-cls/transactional`'s TypeORM adapter takes the same path for
 * `@Transactional(Propagation.Nested, { isolationLevel })` inside another `@Transactional()`
 * (its `wrapWithNestedTransaction` is `client.transaction(options?.isolationLevel, …)`,
 * node_modules/@nestjs-cls/transactional-adapter-typeorm/dist/src/lib/…adapter-typeorm.js);
 * not run here (those packages load only in the worker harness).
 *
 * Failed (round 85): 500 (IsolationLevelRefusedError: "the request's transaction already began
 * at READ COMMITTED…"), no row; without the library (the same service
 * on a route without @Idempotent()): 201, rows ['c1-outer', 'c1-inner'].
 *
 * Fixed: lib/data-layers/nested-isolation.ts `asksIsolation` (used by lazy-transaction.ts
 * `startNow`): the level is weighed only for the code's outermost transaction (depth 1) and
 * one begun beside another's; a nested one is a savepoint at the level around it, as TypeORM
 * makes it (commit "typeorm: a nested transaction's isolation level is TypeORM's to ignore").
 *
 * Suggested fix: ask the level (`askIsolation`) only for the code's outermost transaction on
 * the runner (`startNow`'s `depth === 1`, and a `beside` one begun on a runner of its own
 * without the library); a nested `startTransaction(level)` of its code is a savepoint at the
 * level of the one around it, as TypeORM makes it.
 */
import { Body, Controller, type INestApplication, Injectable, Post } from '@nestjs/common';
import { InjectDataSource, TypeOrmModule } from '@nestjs/typeorm';
import request from 'supertest';
import { Column, DataSource, Entity, PrimaryGeneratedColumn } from 'typeorm';
import { Idempotent } from '../../../lib/index.js';
import { startTypeormApp, type TypeormApp } from '../../support/typeorm-app.js';

@Entity({ name: 'adv85_iso_orders', synchronize: false })
class Order {
  @PrimaryGeneratedColumn()
  id!: number;

  @Column({ type: 'text' })
  tag!: string;
}

@Injectable()
class OrderService {
  constructor(@InjectDataSource() private readonly dataSource: DataSource) {}

  async place(tag: string) {
    await this.dataSource.transaction(async (em) => {
      await em.save(Order, { tag: `${tag}-outer` });
      await em.transaction('SERIALIZABLE', async (inner) => {
        await inner.save(Order, { tag: `${tag}-inner` });
      });
    });
    return { tag };
  }
}

@Controller()
class OrderController {
  constructor(private readonly orders: OrderService) {}

  @Post('plain')
  plain(@Body() body: { tag: string }) {
    return this.orders.place(body.tag);
  }

  @Post('idem')
  @Idempotent()
  idem(@Body() body: { tag: string }) {
    return this.orders.place(body.tag);
  }
}

describe('adversary 85 orm: a nested transaction of the code naming an isolation level is refused', () => {
  let fixture: TypeormApp;
  let app: INestApplication;

  beforeAll(async () => {
    fixture = await startTypeormApp('adv85_orm_nested_isolation', {
      controllers: [OrderController],
      providers: [OrderService],
      entities: [Order],
      imports: [TypeOrmModule.forFeature([Order])],
      max: 6,
      idempotency: { globalKeys: true, databaseTimeoutMs: 1500 },
      setup: async (admin) => {
        await admin.query(
          'CREATE TABLE adv85_iso_orders (id serial PRIMARY KEY, tag text NOT NULL)',
        );
      },
    });
    ({ app } = fixture);
  }, 60_000);

  afterAll(async () => {
    await fixture?.close();
  });

  async function scenario(route: 'plain' | 'idem', tag: string) {
    const answer = await request(app.getHttpServer())
      .post(`/${route}`)
      .set('Idempotency-Key', `key-${tag}`)
      .send({ tag });
    const { rows } = await fixture.admin.query<{ tag: string }>(
      'SELECT tag FROM adv85_iso_orders WHERE tag LIKE $1 ORDER BY id',
      [`${tag}-%`],
    );
    return { status: answer.status, rows: rows.map((row) => row.tag) };
  }

  it('control: without the library (no @Idempotent()), the nested level is ignored by TypeORM: 201, both rows', async () => {
    expect(await scenario('plain', 'c1')).toEqual({ status: 201, rows: ['c1-outer', 'c1-inner'] });
  }, 30_000);

  it('with @Idempotent(), the nested em.transaction(SERIALIZABLE) is a savepoint as in TypeORM: 201, both rows', async () => {
    const first = await scenario('idem', 'i1');
    expect(first).toEqual({ status: 201, rows: ['i1-outer', 'i1-inner'] });
  }, 30_000);
});
