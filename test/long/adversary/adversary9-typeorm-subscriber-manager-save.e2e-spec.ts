import { Body, Controller, type INestApplication, Injectable, Post } from '@nestjs/common';
import { InjectRepository, TypeOrmModule } from '@nestjs/typeorm';
import { Client } from 'pg';
import request from 'supertest';
import {
  AfterInsert,
  Column,
  Entity,
  type EntitySubscriberInterface,
  EventSubscriber,
  type InsertEvent,
  PrimaryGeneratedColumn,
  Repository,
} from 'typeorm';
import { Idempotent } from '../../../lib/index.js';
import { startTypeormApp, type TypeormApp } from '../../support/typeorm-app.js';

/**
 * Adversary, round 9: a save through a subscriber's `event.manager` opens no transaction of its
 * own, so a failed save's row is kept with an answer that says it failed.
 *
 * What the user does: the handler inserts an order with `repository.insert()` (no transaction of
 * TypeORM's: one INSERT). An `@EventSubscriber()` books its shipment in `afterInsert` with
 * `event.manager.save(event.manager.create(Shipment, …))`, best effort: it catches a failure (a job books it later).
 * The shipment's `@AfterInsert` listener (the carrier's API) refuses this one and throws.
 * What happens: round 8's fix makes a save open its own savepoint by having the request's runner
 * VIEWS say "no transaction" to a save. But TypeORM's Broadcaster belongs to the runner itself,
 * not to the view the insert came through: `event.manager` is the raw runner's manager, whose
 * `isTransactionActive` is the runner's own `true`. The save opens no savepoint, its INSERT stays
 * in the request's transaction, the listener's throw is caught, and the request commits 201 with
 * the shipment row its code was told was not booked (and its statements pass as the library's
 * own, `from === runner`).
 * What should happen (as without the library, the same handler on a plain route): the shipment's
 * own transaction is rolled back: 201, the order kept, no shipment row.
 */
@Entity({ name: 'orders', synchronize: false })
class Order {
  @PrimaryGeneratedColumn()
  id!: number;

  @Column({ type: 'text' })
  tag!: string;
}

@Entity({ name: 'shipments', synchronize: false })
class Shipment {
  @PrimaryGeneratedColumn()
  id!: number;

  @Column({ type: 'text' })
  tag!: string;

  /** The carrier's booking: refuses this one. */
  @AfterInsert()
  book() {
    if (this.tag.endsWith('-unshippable')) throw new Error('the carrier refused the shipment');
  }
}

/** Books each new order's shipment, best effort. */
@EventSubscriber()
class ShipOrders implements EntitySubscriberInterface<Order> {
  listenTo() {
    return Order;
  }

  async afterInsert(event: InsertEvent<Order>) {
    try {
      await event.manager.save(event.manager.create(Shipment, { tag: event.entity.tag }));
    } catch {
      // a job books it later
    }
  }
}

@Injectable()
class OrdersService {
  constructor(@InjectRepository(Order) private readonly orders: Repository<Order>) {}

  async place(tag: string) {
    await this.orders.insert({ tag: `${tag}-unshippable` });
    return { placed: true };
  }
}

@Controller()
class OrdersController {
  constructor(private readonly orders: OrdersService) {}

  @Post('orders')
  @Idempotent()
  idempotent(@Body() body: { tag: string }) {
    return this.orders.place(body.tag);
  }

  @Post('plain/orders')
  plain(@Body() body: { tag: string }) {
    return this.orders.place(body.tag);
  }
}

describe("adversary 9: TypeORM, a save through a subscriber's event.manager whose listener fails", () => {
  let fixture: TypeormApp;
  let admin: Client;
  let app: INestApplication;

  beforeAll(async () => {
    fixture = await startTypeormApp('adv9_subscriber_manager_save', {
      controllers: [OrdersController],
      providers: [OrdersService],
      entities: [Order, Shipment],
      subscribers: [ShipOrders],
      imports: [TypeOrmModule.forFeature([Order])],
      setup: async (admin) => {
        await admin.query('CREATE TABLE orders (id serial PRIMARY KEY, tag text NOT NULL)');
        await admin.query('CREATE TABLE shipments (id serial PRIMARY KEY, tag text NOT NULL)');
      },
    });
    ({ admin, app } = fixture);
  });

  afterAll(() => fixture?.close());

  const rows = async (table: string, tag: string) =>
    Number(
      (
        await admin.query<{ n: string }>(`SELECT count(*) AS n FROM ${table} WHERE tag = $1`, [
          `${tag}-unshippable`,
        ])
      ).rows[0].n,
    );

  const post = async (path: string, tag: string, key?: string) => {
    const req = request(app.getHttpServer()).post(path).timeout(6_000);
    const response = await (key ? req.set('Idempotency-Key', key) : req).send({ tag });
    return {
      status: response.status,
      orders: await rows('orders', tag),
      shipments: await rows('shipments', tag),
    };
  };

  it("without the library: 201, the order kept, the refused shipment's row rolled back (the control)", async () => {
    expect(await post('/plain/orders', 'plain')).toEqual({ status: 201, orders: 1, shipments: 0 });
  });

  it('with it: as without (201, the order, no shipment), or a clear 500 with nothing kept', async () => {
    const outcome = await post('/orders', 'keyed', 'orders-unshippable');
    // Observed: { status: 201, orders: 1, shipments: 1 }: the shipment the subscriber was told
    // had failed, committed with the stored answer.
    expect([
      { status: 201, orders: 1, shipments: 0 },
      { status: 500, orders: 0, shipments: 0 },
    ]).toContainEqual(outcome);
  });
});
