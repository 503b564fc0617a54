import { Body, Controller, type INestApplication, Post } from '@nestjs/common';
import { InjectDataSource } from '@nestjs/typeorm';
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
} from 'typeorm';
import { Idempotent } from '../../../lib/index.js';
import { startTypeormApp, type TypeormApp } from '../../support/typeorm-app.js';

/**
 * Adversary, round 8: a query builder's insert with `.useTransaction(true)` asks TypeORM for a
 * transaction of its own around the insert and its subscribers (InsertQueryBuilder.execute
 * starts one when `queryRunner.isTransactionActive` is false, and rolls it back if a
 * subscriber's `afterInsert` throws). In a request the runner says a transaction is open (only
 * a marked save is told otherwise), so no savepoint is made: the subscriber throws, the
 * handler catches the failure and answers 201 `{ insert: 'failed: …' }`, and the row of the
 * insert it was told had failed commits with the stored answer.
 * Without the library: the insert's own transaction is rolled back: 201, nothing kept.
 * Expected with it: the same (a savepoint, as for a save), or a clear 500 with nothing kept.
 */
@Entity({ name: 'orders', synchronize: false })
class Order {
  @PrimaryGeneratedColumn()
  id!: number;

  @Column({ type: 'text' })
  tag!: string;
}

/** The search index's sync: fails for this order. */
@EventSubscriber()
class OrderIndexer implements EntitySubscriberInterface<Order> {
  listenTo() {
    return Order;
  }

  afterInsert(event: InsertEvent<Order>) {
    const tag = (event.entity as { tag?: string } | undefined)?.tag ?? '';
    if (tag.endsWith('-unindexable')) throw new Error('the search index refused the order');
  }
}

@Controller()
class OrdersController {
  constructor(@InjectDataSource() private readonly dataSource: DataSource) {}

  private async place(tag: string) {
    try {
      await this.dataSource
        .createQueryBuilder()
        .insert()
        .into(Order)
        .values({ tag: `${tag}-unindexable` })
        .useTransaction(true)
        .execute();
      return { insert: 'placed' };
    } catch (error) {
      return { insert: `failed: ${(error as Error).message}` };
    }
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

describe('adversary 8: TypeORM, a query builder insert with useTransaction(true) whose subscriber fails', () => {
  let fixture: TypeormApp;
  let admin: Client;
  let app: INestApplication;

  beforeAll(async () => {
    fixture = await startTypeormApp('adv8_use_transaction', {
      controllers: [OrdersController],
      entities: [Order],
      subscribers: [OrderIndexer],
      setup: async (admin) => {
        await admin.query('CREATE TABLE orders (id serial PRIMARY KEY, tag text NOT NULL)');
      },
    });
    ({ admin, app } = fixture);
  });

  afterAll(() => fixture?.close());

  const kept = async (tag: string) =>
    (
      await admin.query<{ tag: string }>('SELECT tag FROM orders WHERE tag LIKE $1 ORDER BY tag', [
        `${tag}-%`,
      ])
    ).rows.map((row) => row.tag);

  const post = async (path: string, tag: string, key?: string) => {
    const req = request(app.getHttpServer()).post(path).timeout(6_000);
    const response = await (key ? req.set('Idempotency-Key', key) : req).send({ tag });
    return { status: response.status, kept: await kept(tag) };
  };

  it('without the library: 201, the failed insert rolled back (the control)', async () => {
    expect(await post('/plain/orders', 'p')).toEqual({ status: 201, kept: [] });
  });

  it('with it: as without (201, nothing kept), or a clear 500', async () => {
    const outcome = await post('/orders', 'i', 'orders-i');
    // Observed: { status: 201, kept: ['i-unindexable'] }.
    expect([
      { status: 201, kept: [] },
      { status: 500, kept: [] },
    ]).toContainEqual(outcome);
  });
});
