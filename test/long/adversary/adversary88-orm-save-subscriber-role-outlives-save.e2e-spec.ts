/**
 * Adversary 88 (orm): the row-level-security recipe written as a TypeORM subscriber
 * (`afterTransactionStart` runs `SET LOCAL ROLE tenant_user` and
 * `set_config('app.tenant', …, true)` for every transaction the app starts) and a
 * `repository.save()`, which TypeORM wraps in a transaction of its own. Without the library
 * the save's `COMMIT` ends the role: the handler's next statement (an outbox row the tenant
 * role may not write) runs as the app's login. Under `@Idempotent()` the save is a savepoint,
 * and its `RELEASE` keeps the `SET LOCAL ROLE`; the library puts the setting back
 * (`app.tenant` reads '' again) but not the role, so the outbox insert runs as `tenant_user`:
 * "permission denied for table …", 500, on every try, where without the library it answers
 * 201. (With a policy instead of a grant the same statement would run, as the tenant role
 * with no tenant, and see or write other rows in silence.)
 *
 * User code:
 *
 *   @EventSubscriber() class TenantRls implements EntitySubscriberInterface {
 *     async afterTransactionStart(e: TransactionStartEvent) {
 *       await e.queryRunner.query('SET LOCAL ROLE adv88_tenant_user');
 *       await e.queryRunner.query(`SELECT set_config('app.tenant', $1, true)`, [tenant()]);
 *     }
 *   }
 *   @Post() @Idempotent() async place(@Body() b) {
 *     const order = await this.orders.save({ tenant: 't1', tag: b.tag });
 *     await this.dataSource.query('INSERT INTO adv88_rls_outbox …', [order.id]);
 *     return { id: order.id };
 *   }
 *
 * Code path: lib/data-layers/lazy-transaction.ts `startNow`: at depth 1 `outermostKept =
 * !isPersisting()`, and `keepState(OUTERMOST_KEPT_AS)` (the role, session authorization and
 * search path kept to be put back at its COMMIT) is skipped for a save's own transaction; the
 * settings its subscribers set are put back (`NestedCommit`), the role is not.
 *
 * Docs quote: docs/guides/transactions.md: "the library puts back the role, session
 * authorization and search path when the outermost nested transaction commits, as its own
 * `COMMIT` would without the library"; "(what its subscribers' `afterTransactionStart` sets
 * counts as its own)"; and the save's paragraph: "(a save's savepoint does not keep and put
 * back the role and search path, as a nested transaction of the handler's does: TypeORM's
 * statements set none)": TypeORM's statements do not, but the subscribers TypeORM runs at
 * the save's start do.
 *
 * Severity: medium (the request fails on every try, stored as a 500 and replayed, where it
 * works without the library; with a row-level policy in place of a missing grant, high: the
 * statement runs as the tenant role with the tenant put back, and its answer is stored).
 *
 * Failed before the fix (verified unskipped): 500 and no outbox row (the handler's error: "permission
 * denied for table adv88_rls_outbox"); expected 201 and one outbox row. Controls pass: the
 * same handler on a route without `@Idempotent()` (201, one outbox row), and with
 * `dataSource.transaction((m) => m.save(…))` in place of the bare save under `@Idempotent()`
 * (the code's outermost transaction: its role is put back, 201).
 *
 * Suggested fix: keep and put back the role, session authorization and search path for a
 * save's own transaction too, at least when a statement in it (its subscribers', its
 * listeners') set one (`NestedCommit` already notes the statements; the role's round trip
 * then costs only where it is needed), or refuse such a statement clearly.
 *
 * Fixed (session of 2026-12-06, third): a save's own transaction keeps the role, session
 * authorization and search path just before a statement in it sets one (`keepSaveState` in
 * lib/data-layers/lazy-transaction.ts, by `setsIdentity`), and puts them back at its commit as
 * for the code's own outermost transaction; a save whose statements set none pays nothing.
 */
import { Body, Controller, type INestApplication, Injectable, Post } from '@nestjs/common';
import { InjectDataSource, InjectRepository, TypeOrmModule } from '@nestjs/typeorm';
import request from 'supertest';
import {
  Column,
  DataSource,
  Entity,
  type EntitySubscriberInterface,
  EventSubscriber,
  PrimaryGeneratedColumn,
  Repository,
  type TransactionStartEvent,
} from 'typeorm';
import { Idempotent } from '../../../lib/index.js';
import { startTypeormApp, type TypeormApp } from '../../support/typeorm-app.js';

@Entity({ name: 'adv88_rls_orders', synchronize: false })
class Order {
  @PrimaryGeneratedColumn()
  id!: number;

  @Column({ type: 'text' })
  tenant!: string;

  @Column({ type: 'text' })
  tag!: string;
}

@EventSubscriber()
class TenantRls implements EntitySubscriberInterface {
  async afterTransactionStart(event: TransactionStartEvent) {
    await event.queryRunner.query('SET LOCAL ROLE adv88_tenant_user');
    await event.queryRunner.query(`SELECT set_config('app.tenant', $1, true)`, ['t1']);
  }
}

@Injectable()
class OrderService {
  constructor(
    @InjectDataSource() private readonly dataSource: DataSource,
    @InjectRepository(Order) private readonly orders: Repository<Order>,
  ) {}

  async place(tag: string, inTransaction: boolean) {
    const order = inTransaction
      ? await this.dataSource.transaction((m) => m.save(Order, { tenant: 't1', tag }))
      : await this.orders.save({ tenant: 't1', tag });
    await this.dataSource.query('INSERT INTO adv88_rls_outbox (order_id, tag) VALUES ($1, $2)', [
      order.id,
      tag,
    ]);
    return { id: order.id, tag };
  }
}

@Controller()
class OrderController {
  constructor(private readonly orders: OrderService) {}

  @Post('plain')
  plain(@Body() body: { tag: string }) {
    return this.orders.place(body.tag, false);
  }

  @Post('idem')
  @Idempotent()
  idem(@Body() body: { tag: string }) {
    return this.orders.place(body.tag, false);
  }

  @Post('idem-transaction')
  @Idempotent()
  idemTransaction(@Body() body: { tag: string }) {
    return this.orders.place(body.tag, true);
  }
}

describe('adversary 88 orm: a role set by a save’s afterTransactionStart subscriber outlives the save', () => {
  let fixture: TypeormApp;
  let app: INestApplication;

  beforeAll(async () => {
    fixture = await startTypeormApp('adv88_orm_save_role', {
      controllers: [OrderController],
      providers: [OrderService],
      entities: [Order],
      subscribers: [TenantRls],
      imports: [TypeOrmModule.forFeature([Order])],
      max: 6,
      setup: async (admin) => {
        await admin.query(`DO $$ BEGIN
          IF NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'adv88_tenant_user') THEN
            CREATE ROLE adv88_tenant_user NOLOGIN;
          END IF; END $$`);
        await admin.query(`
          CREATE TABLE adv88_rls_orders (id serial PRIMARY KEY, tenant text NOT NULL, tag text NOT NULL);
          CREATE TABLE adv88_rls_outbox (id serial PRIMARY KEY, order_id int NOT NULL, tag text NOT NULL);
          GRANT SELECT, INSERT ON adv88_rls_orders TO adv88_tenant_user;
          GRANT USAGE ON SEQUENCE adv88_rls_orders_id_seq TO adv88_tenant_user;
        `);
      },
    });
    ({ app } = fixture);
  }, 60_000);

  afterAll(async () => {
    await fixture?.close();
  });

  async function scenario(route: 'plain' | 'idem' | 'idem-transaction', tag: string) {
    const post = () =>
      request(app.getHttpServer())
        .post(`/${route}`)
        .set('Idempotency-Key', `key-${tag}`)
        .send({ tag });
    const first = await post();
    const retried = await post();
    const { rows } = await fixture.admin.query<{ tag: string }>(
      'SELECT tag FROM adv88_rls_outbox WHERE tag = $1',
      [tag],
    );
    return { statuses: [first.status, retried.status], outbox: rows.map((row) => row.tag) };
  }

  it('control: without @Idempotent(), the save’s COMMIT ends the role: 201, the outbox row', async () => {
    const { statuses, outbox } = await scenario('plain', 'c1');
    expect({ first: statuses[0], outbox: outbox.slice(0, 1) }).toEqual({
      first: 201,
      outbox: ['c1'],
    });
  }, 30_000);

  it('control: keyed, the save inside dataSource.transaction(): its role put back, 201 replayed, one outbox row', async () => {
    expect(await scenario('idem-transaction', 'c2')).toEqual({
      statuses: [201, 201],
      outbox: ['c2'],
    });
  }, 30_000);

  it('keyed, a bare save: its role ends with it as its COMMIT would end it: 201 replayed, one outbox row', async () => {
    expect(await scenario('idem', 'i1')).toEqual({ statuses: [201, 201], outbox: ['i1'] });
  }, 30_000);
});
