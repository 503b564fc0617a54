import { readFileSync } from 'node:fs';
import { Body, Controller, type INestApplication, Module, Post } from '@nestjs/common';
import { InjectDataSource, TypeOrmModule } from '@nestjs/typeorm';
import { Client } from 'pg';
import request from 'supertest';
import {
  Column,
  DataSource,
  Entity,
  type EntitySubscriberInterface,
  EventSubscriber,
  type InsertEvent,
  PrimaryGeneratedColumn,
  type TransactionCommitEvent,
} from 'typeorm';
import { IDEMPOTENCY_MIGRATIONS, IdempotencyModule, Idempotent } from '../../../lib/index.js';
import { bootstrapTestApp } from '../../support/bootstrap.js';
import { createTestDatabase, type TestDatabase } from '../../support/database.js';

/**
 * Adversary, round 10: a transactional outbox written by a subscriber's `beforeTransactionCommit`
 * through `event.manager` is refused inside the request (500 on every try), where without the
 * library it commits with the transaction it is the event of.
 *
 * What the user does: schema-per-tenant, as transactions.md allows (`SET LOCAL search_path` in
 * a nested transaction, "the handler's own"): the handler runs `dataSource.transaction()`, sets
 * the tenant's schema with `SET LOCAL search_path`, and saves an order through the manager it is
 * handed. An `@EventSubscriber()` is the app's transactional outbox: `afterInsert` notes the
 * event on `event.queryRunner.data` (TypeORM's place for data shared with subscribers), and
 * `beforeTransactionCommit` writes what was noted with `event.manager.insert(OutboxEvent, …)`,
 * so that the event commits with the order, or not at all.
 * What happens: TypeORM broadcasts the transaction events from the runner whose method runs: the
 * library binds `commitTransaction` to its one raw runner, so `event.manager` is the raw runner's
 * manager (one view of the library's), not the view that started the nested transaction. The
 * outbox insert is taken for a statement beside that transaction (which set its search path) and
 * refused with StatementBesideNestedTransactionError; the request can only roll back.
 * What should happen (as without the library, the same handler on a plain route): the
 * transaction event's manager is the transaction's: 201, the order and its outbox event kept
 * once; a retry replays.
 */
@Entity({ name: 'orders', synchronize: false })
class Order {
  @PrimaryGeneratedColumn()
  id!: number;

  @Column({ type: 'text' })
  tag!: string;
}

@Entity({ name: 'outbox', schema: 'public', synchronize: false })
class OutboxEvent {
  @PrimaryGeneratedColumn()
  id!: number;

  @Column({ type: 'text' })
  topic!: string;

  @Column({ type: 'text' })
  tag!: string;
}

/** The app's transactional outbox: an event per new order, written as its transaction commits. */
@EventSubscriber()
class Outbox implements EntitySubscriberInterface {
  afterInsert(event: InsertEvent<unknown>) {
    if (!(event.entity instanceof Order)) return;
    const data = event.queryRunner.data as { pending?: { topic: string; tag: string }[] };
    (data.pending ??= []).push({ topic: 'order.placed', tag: event.entity.tag });
  }

  async beforeTransactionCommit(event: TransactionCommitEvent) {
    const data = event.queryRunner.data as { pending?: { topic: string; tag: string }[] };
    const pending = data.pending ?? [];
    data.pending = [];
    if (pending.length > 0) await event.manager.insert(OutboxEvent, pending);
  }
}

@Controller()
class OrdersController {
  constructor(@InjectDataSource() private readonly dataSource: DataSource) {}

  private async place(tag: string) {
    const order = await this.dataSource.transaction(async (manager) => {
      await manager.query('SET LOCAL search_path TO tenant_acme');
      return manager.save(manager.create(Order, { tag }));
    });
    return { placed: order.tag };
  }

  @Post('orders')
  @Idempotent()
  idempotent(@Body() body: { tag: string }) {
    return this.place(body.tag);
  }

  @Post('plain/orders')
  plain(@Body() body: { tag: string }) {
    return this.place(body.tag);
  }
}

describe("adversary 10: TypeORM, an outbox written by beforeTransactionCommit's event.manager", () => {
  let database: TestDatabase;
  let admin: Client;
  let app: INestApplication;

  beforeAll(async () => {
    database = await createTestDatabase('adv10_commit_event_manager');
    admin = new Client({ connectionString: database.url });
    await admin.connect();
    await admin.query(readFileSync('migrations/schema.sql', 'utf8'));
    await admin.query('CREATE SCHEMA tenant_acme');
    await admin.query('CREATE TABLE tenant_acme.orders (id serial PRIMARY KEY, tag text NOT NULL)');
    await admin.query(
      'CREATE TABLE public.outbox (id serial PRIMARY KEY, topic text NOT NULL, tag text NOT NULL)',
    );

    @Module({
      imports: [
        TypeOrmModule.forRoot({
          type: 'postgres',
          url: database.url,
          entities: [Order, OutboxEvent],
          subscribers: [Outbox],
          migrations: [...IDEMPOTENCY_MIGRATIONS],
          migrationsRun: false,
          extra: { max: 4 },
        }),
        IdempotencyModule.forRoot({ globalKeys: true }),
      ],
      controllers: [OrdersController],
    })
    class OrdersModule {}
    app = await bootstrapTestApp(OrdersModule, 'express');
  });

  afterAll(async () => {
    await app?.close();
    await admin?.end();
    await database?.drop();
  });

  const counts = async (tag: string) => ({
    orders: Number(
      (await admin.query('SELECT count(*) AS n FROM tenant_acme.orders WHERE tag = $1', [tag]))
        .rows[0].n,
    ),
    outbox: Number(
      (await admin.query('SELECT count(*) AS n FROM public.outbox WHERE tag = $1', [tag])).rows[0]
        .n,
    ),
  });

  it('without the library: 201, the order and its outbox event (the control)', async () => {
    const plain = await request(app.getHttpServer()).post('/plain/orders').send({ tag: 'plain' });
    expect(plain.status).toBe(201);
    expect(await counts('plain')).toEqual({ orders: 1, outbox: 1 });
  });

  it('with it: as without (201, the order and its event once), and the retry replays', async () => {
    const send = () =>
      request(app.getHttpServer())
        .post('/orders')
        .timeout(6_000)
        .set('Idempotency-Key', 'order-outbox')
        .send({ tag: 'keyed' });
    const first = await send();
    const retry = await send();
    // Observed: 500 on both (StatementBesideNestedTransactionError from the outbox insert),
    // nothing kept.
    expect({ first: first.status, retry: retry.status, ...(await counts('keyed')) }).toEqual({
      first: 201,
      retry: 201,
      orders: 1,
      outbox: 1,
    });
    expect(retry.body).toEqual(first.body);
  });
});
