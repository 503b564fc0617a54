/**
 * Adversary 88 (orm): schema per tenant, set by a TypeORM subscriber for every transaction the
 * app starts (`afterTransactionStart` runs `SET LOCAL search_path TO tenant_1, public`), and a
 * `repository.save()`, which TypeORM wraps in a transaction of its own. Without the library
 * the save's `COMMIT` ends the search path: the handler's next statement, an unqualified
 * `INSERT INTO adv88_sp_audit …` meant for the shared audit table, lands in
 * `public.adv88_sp_audit`. Under `@Idempotent()` the save is a savepoint, its `RELEASE` keeps
 * the `SET LOCAL`, and the library does not put the search path back for a save: the audit
 * row lands in the tenant's own `adv88_sp_tenant_1.adv88_sp_audit`, in silence, 201 stored and
 * replayed. (Same root as adversary88-orm-save-subscriber-role-outlives-save, which shows the
 * role; here the outcome is silent.)
 *
 * User code:
 *
 *   @EventSubscriber() class TenantSchema implements EntitySubscriberInterface {
 *     async afterTransactionStart(e: TransactionStartEvent) {
 *       await e.queryRunner.query('SET LOCAL search_path TO adv88_sp_tenant_1, public');
 *     }
 *   }
 *   @Post() @Idempotent() async place(@Body() b) {
 *     const order = await this.orders.save({ tag: b.tag });
 *     await this.dataSource.query('INSERT INTO adv88_sp_audit (tag) VALUES ($1)', [b.tag]);
 *     return { id: order.id };
 *   }
 *
 * Code path: lib/data-layers/lazy-transaction.ts `startNow`: at depth 1 `outermostKept =
 * !isPersisting()`: for a save's own transaction `keepState(OUTERMOST_KEPT_AS)` is skipped,
 * and its commit's `afterRelease` restores no state (`this.outermostKept ? restoreState(…) :
 * undefined`, `nestedCommit.endingText(this.outermostKept)`); the search path set by the
 * subscriber on the save's runner lasts to the request's COMMIT.
 *
 * Docs quote: docs/guides/transactions.md: "the library puts back the role, session
 * authorization and search path when the outermost nested transaction commits, as its own
 * `COMMIT` would without the library"; "(what its subscribers' `afterTransactionStart` sets
 * counts as its own)"; the save's paragraph's premise "(a save's savepoint does not keep and
 * put back the role and search path […]: TypeORM's statements set none)" does not hold for
 * the subscribers TypeORM runs at the save's start.
 *
 * Severity: high (a wrong effect committed in silence: the audit row written to the tenant's
 * table instead of the shared one, the 201 stored and replayed).
 *
 * Failed before the fix (verified unskipped): public audit rows [] and tenant audit rows ['i1'];
 * expected public ['i1'], tenant []. Controls pass: without `@Idempotent()` (public ['c1']),
 * and keyed with the save inside `dataSource.transaction()` (the code's outermost: its search
 * path put back, public ['c2']).
 *
 * Suggested fix: keep and put back the role, session authorization and search path for a
 * save's own transaction too (at least once a statement in it, a subscriber's or a
 * listener's, set one: `NestedCommit` sees those statements), as for any outermost one.
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

@Entity({ name: 'adv88_sp_orders', schema: 'public', synchronize: false })
class Order {
  @PrimaryGeneratedColumn()
  id!: number;

  @Column({ type: 'text' })
  tag!: string;
}

@EventSubscriber()
class TenantSchema implements EntitySubscriberInterface {
  async afterTransactionStart(event: TransactionStartEvent) {
    await event.queryRunner.query('SET LOCAL search_path TO adv88_sp_tenant_1, public');
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
      ? await this.dataSource.transaction((m) => m.save(Order, { tag }))
      : await this.orders.save({ tag });
    await this.dataSource.query('INSERT INTO adv88_sp_audit (tag) VALUES ($1)', [tag]);
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

describe('adversary 88 orm: a search path set by a save’s afterTransactionStart subscriber outlives the save', () => {
  let fixture: TypeormApp;
  let app: INestApplication;

  beforeAll(async () => {
    fixture = await startTypeormApp('adv88_orm_save_search_path', {
      controllers: [OrderController],
      providers: [OrderService],
      entities: [Order],
      subscribers: [TenantSchema],
      imports: [TypeOrmModule.forFeature([Order])],
      max: 6,
      setup: async (admin) => {
        await admin.query(`
          CREATE TABLE public.adv88_sp_orders (id serial PRIMARY KEY, tag text NOT NULL);
          CREATE TABLE public.adv88_sp_audit (id serial PRIMARY KEY, tag text NOT NULL);
          CREATE SCHEMA adv88_sp_tenant_1;
          CREATE TABLE adv88_sp_tenant_1.adv88_sp_audit (id serial PRIMARY KEY, tag text NOT NULL);
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
      request(app.getHttpServer()).post(`/${route}`).set('Idempotency-Key', `key-${tag}`).send({
        tag,
      });
    const first = await post();
    const audit = async (schema: string) =>
      (
        await fixture.admin.query<{ tag: string }>(
          `SELECT tag FROM ${schema}.adv88_sp_audit WHERE tag = $1`,
          [tag],
        )
      ).rows.map((row) => row.tag);
    return {
      status: first.status,
      shared: await audit('public'),
      tenant: await audit('adv88_sp_tenant_1'),
    };
  }

  it('control: without @Idempotent(), the save’s COMMIT ends the search path: the shared audit row', async () => {
    expect(await scenario('plain', 'c1')).toEqual({ status: 201, shared: ['c1'], tenant: [] });
  }, 30_000);

  it('control: keyed, the save inside dataSource.transaction(): its search path put back', async () => {
    expect(await scenario('idem-transaction', 'c2')).toEqual({
      status: 201,
      shared: ['c2'],
      tenant: [],
    });
  }, 30_000);

  it('keyed, a bare save: its search path ends with it: the shared audit row', async () => {
    expect(await scenario('idem', 'i1')).toEqual({ status: 201, shared: ['i1'], tenant: [] });
  }, 30_000);
});
