import { Body, Controller, type INestApplication, Injectable, Param, Post } from '@nestjs/common';
import { InjectDataSource } from '@nestjs/typeorm';
import { Client } from 'pg';
import request from 'supertest';
import { AfterInsert, Column, DataSource, Entity, PrimaryGeneratedColumn } from 'typeorm';
import { Idempotent, IdempotentTransaction } from '../../../lib/index.js';
import { startTypeormApp, type TypeormApp } from '../../support/typeorm-app.js';

/**
 * Adversary, round 8: a `save()` through a manager the library did not mark as persisting
 * opens no savepoint of its own. transactions.md: "A `save()` … outside any nested transaction
 * opens its own, as without the library … so a handler that catches the error keeps none of its
 * rows"; and services "inject `IdempotentTransaction` (`.manager`, `.getRepository(Entity)`),
 * which outside an idempotent request gives the DataSource's own manager, so the same service
 * works on every route". `LazyTransaction.manager` is `viewOf(runner, false)`: its saves are not
 * marked, the view says a transaction is open, and TypeORM's save opens none. The order's
 * `@AfterInsert` listener throws, the service catches it and reports the order as not placed:
 * 201 `{ save: 'failed: …' }` with the order's row committed beside the stored answer. The same
 * with a manager of `dataSource.createEntityManager()`.
 * Without the library (the same service on a route without `@Idempotent()`): TypeORM's own
 * transaction rolls the row back: 201, nothing kept. Expected with it: the same.
 */
@Entity({ name: 'orders', synchronize: false })
class Order {
  @PrimaryGeneratedColumn()
  id!: number;

  @Column({ type: 'text' })
  tag!: string;

  /** The search index's sync: fails for this order. */
  @AfterInsert()
  index() {
    if (this.tag.endsWith('-unindexable')) throw new Error('the search index refused the order');
  }
}

@Injectable()
class OrdersService {
  constructor(
    private readonly tx: IdempotentTransaction,
    @InjectDataSource() private readonly dataSource: DataSource,
  ) {}

  private async attempt(save: () => Promise<unknown>) {
    try {
      await save();
      return 'placed';
    } catch (error) {
      return `failed: ${(error as Error).message}`;
    }
  }

  /** The documented explicit way: the request's transaction by name. */
  placeByName(tag: string) {
    const orders = this.tx.getRepository(Order);
    return this.attempt(() => orders.save(orders.create({ tag: `${tag}-unindexable` })));
  }

  /** A manager of its own (`dataSource.createEntityManager()`). */
  placeByOwnManager(tag: string) {
    const manager = this.dataSource.createEntityManager();
    return this.attempt(() => manager.save(manager.create(Order, { tag: `${tag}-unindexable` })));
  }
}

@Controller()
class OrdersController {
  constructor(private readonly orders: OrdersService) {}

  private place(how: string, tag: string) {
    return how === 'by-name' ? this.orders.placeByName(tag) : this.orders.placeByOwnManager(tag);
  }

  @Post('orders/:how')
  @Idempotent()
  async idempotent(@Param('how') how: string, @Body() body: { tag: string }) {
    return { save: await this.place(how, body.tag) };
  }

  @Post('plain/orders/:how')
  async plain(@Param('how') how: string, @Body() body: { tag: string }) {
    return { save: await this.place(how, body.tag) };
  }
}

describe('adversary 8: TypeORM, a save through IdempotentTransaction (or a manager of its own) whose listener fails', () => {
  let fixture: TypeormApp;
  let admin: Client;
  let app: INestApplication;

  beforeAll(async () => {
    fixture = await startTypeormApp('adv8_unmarked_manager_save', {
      controllers: [OrdersController],
      providers: [OrdersService],
      entities: [Order],
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

  for (const how of ['by-name', 'own-manager']) {
    it(`${how}, without the library: 201, the failed save's row rolled back (the control)`, async () => {
      expect(await post(`/plain/orders/${how}`, `p${how}`)).toEqual({ status: 201, kept: [] });
    });

    it(`${how}, with it: as without (201, nothing kept), or a clear 500`, async () => {
      const outcome = await post(`/orders/${how}`, `i${how}`, `orders-${how}`);
      // Observed: { status: 201, kept: ['i…-unindexable'] }: the order the answer says failed.
      expect([
        { status: 201, kept: [] },
        { status: 500, kept: [] },
      ]).toContainEqual(outcome);
    });
  }
});
