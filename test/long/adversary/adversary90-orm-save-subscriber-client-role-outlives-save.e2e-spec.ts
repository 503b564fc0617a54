/**
 * Fixed (session of 2026-12-06 fourth): the client path (`clientOf`) keeps a save's state
 * (`keepSaveState`) before a statement in it that sets the role, session authorization or search
 * path, as the `query()` path does: the save's RELEASE puts the role back.
 *
 * Adversary 90 (orm): round 88's fix of a save's role (a save's own transaction keeps and
 * puts back the role, session authorization and search path once a statement in it sets one:
 * `keepSaveState`), met by a subscriber that sets the role through the node-postgres client
 * its runner hands out (`await event.queryRunner.connect()`, pg's own API, as code that sets
 * several settings in one text or uses pg's callbacks does) rather than through
 * `queryRunner.query()`. Without the library the save's `COMMIT` ends the role. Under
 * `@Idempotent()` the save is a savepoint whose `RELEASE` keeps the `SET LOCAL ROLE`, and the
 * client's statement is never seen by `keepSaveState`: the role outlives the save, and the
 * handler's next statement (an outbox row the tenant role may not write) runs as the tenant:
 * "permission denied", 500 stored and replayed on every try, where without the library (and
 * with `queryRunner.query()`) it answers 201.
 *
 * User code:
 *
 *   @EventSubscriber() class TenantRls implements EntitySubscriberInterface {
 *     async afterTransactionStart(e: TransactionStartEvent) {
 *       const client = (await e.queryRunner.connect()) as PoolClient;
 *       await client.query('SET LOCAL ROLE adv90_tenant_user');
 *     }
 *   }
 *   @Post() @Idempotent() async place(@Body() b) {
 *     const order = await this.orders.save({ tenant: 't1', tag: b.tag });
 *     await this.dataSource.query('INSERT INTO adv90_rls_outbox …', [order.id]);
 *     return { id: order.id };
 *   }
 *
 * Code path: lib/data-layers/lazy-transaction.ts `ensureRunner`: `keepSaveState` is a closure
 * called only from `queryFrom` (`prepare`, `if (nested) await keepSaveState(args[0])`);
 * `clientOf`'s `judged` calls `judge` and `keepSettingsOf` (which leaves the identity
 * settings, `NOT_KEPT_LOCALLY`, to `keepState`) but never `keepSaveState`, so `saveKept`
 * stays false and the save's commit (`commitFrom`'s `afterRelease`) puts back no role.
 *
 * Docs quote: docs/guides/transactions.md: "a save's savepoint keeps and puts back the role,
 * session authorization and search path, as a nested transaction of the handler's does, only
 * once a statement in it sets one: an `afterTransactionStart` subscriber's `SET LOCAL
 * search_path`"; `judge`'s comment: "whichever way it came (`queryFrom`, `streamFrom`,
 * `clientOf`): one path, so that no way round it escapes a rule".
 *
 * Severity: medium (the request fails on every try, stored as a 500 and replayed, where it
 * works without the library; with a row-level policy in place of a missing grant, high: the
 * later statement runs as the tenant role in silence).
 *
 * Fails now (verified unskipped, twice): statuses [500, 500] (the second a replay of the
 * stored 500), no outbox row (expected [201, 201] and one row); `SELECT current_user` after
 * the save reads `adv90_tenant_user` (`postgres` in the controls).
 * Controls: the same subscriber on a route without `@Idempotent()`: 201 and the outbox row;
 * keyed, the subscriber setting the role through `queryRunner.query()`: 201, one row.
 *
 * Suggested fix: call `keepSaveState` on the client path too (`clientOf`'s `judged`, before
 * sending a text that `setsIdentity`), or move it into `keepSettingsOf`, which both paths
 * share.
 */
import { Body, Controller, type INestApplication, Injectable, Post } from '@nestjs/common';
import { InjectDataSource, InjectRepository, TypeOrmModule } from '@nestjs/typeorm';
import { type PoolClient } from 'pg';
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

@Entity({ name: 'adv90_rls_orders', synchronize: false })
class Order {
  @PrimaryGeneratedColumn()
  id!: number;

  @Column({ type: 'text' })
  tenant!: string;

  @Column({ type: 'text' })
  tag!: string;
}

/** How the subscriber sends its `SET LOCAL ROLE`: the pg client, or the runner's `query()`. */
const through: { value: 'client' | 'query' } = { value: 'client' };

@EventSubscriber()
class TenantRls implements EntitySubscriberInterface {
  async afterTransactionStart(event: TransactionStartEvent) {
    if (through.value === 'query') {
      await event.queryRunner.query('SET LOCAL ROLE adv90_tenant_user');
      return;
    }
    const client = (await event.queryRunner.connect()) as PoolClient;
    await client.query('SET LOCAL ROLE adv90_tenant_user');
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
    await this.dataSource.query('INSERT INTO adv90_rls_outbox (order_id, tag) VALUES ($1, $2)', [
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

describe('adversary 90 orm: a role a save’s subscriber sets through the runner’s pg client outlives the save', () => {
  let fixture: TypeormApp;
  let app: INestApplication;

  beforeAll(async () => {
    fixture = await startTypeormApp('adv90_orm_save_role', {
      controllers: [OrderController],
      providers: [OrderService],
      entities: [Order],
      subscribers: [TenantRls],
      imports: [TypeOrmModule.forFeature([Order])],
      max: 6,
      setup: async (admin) => {
        await admin.query(`DO $$ BEGIN
          IF NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'adv90_tenant_user') THEN
            CREATE ROLE adv90_tenant_user NOLOGIN;
          END IF; END $$`);
        await admin.query(`
          CREATE TABLE adv90_rls_orders (id serial PRIMARY KEY, tenant text NOT NULL, tag text NOT NULL);
          CREATE TABLE adv90_rls_outbox (id serial PRIMARY KEY, order_id int NOT NULL, tag text NOT NULL);
          GRANT SELECT, INSERT ON adv90_rls_orders TO adv90_tenant_user;
          GRANT USAGE ON SEQUENCE adv90_rls_orders_id_seq TO adv90_tenant_user;
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
      'SELECT tag FROM adv90_rls_outbox WHERE tag = $1',
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

  it('control: keyed, the role set through queryRunner.query(): put back at the save’s end, 201 replayed, one outbox row', async () => {
    through.value = 'query';
    try {
      expect(await scenario('idem', 'c2')).toEqual({ statuses: [201, 201], outbox: ['c2'] });
    } finally {
      through.value = 'client';
    }
  }, 30_000);

  it('keyed, the role set through the runner’s pg client: put back at the save’s end too, 201 replayed, one outbox row', async () => {
    expect(await scenario('idem', 'i1')).toEqual({ statuses: [201, 201], outbox: ['i1'] });
  }, 30_000);
});
