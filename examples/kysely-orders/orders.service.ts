import { Inject, Injectable, NotFoundException } from '@nestjs/common';
import { type Kysely } from 'kysely';
import { PhaseRunner } from '../../lib/index.js';
import { type CreateOrderDto } from './create-order.dto.js';
import { KYSELY, type Order, type OrdersDatabase } from './database.js';
import { type Hold, holdAt } from './test-hold.js';
import { WAREHOUSE, type WarehouseClient } from './warehouse.client.js';

/** An order as the API answers it. */
export interface OrderView {
  id: number;
  sku: string;
  quantity: number;
  status: string;
  trackingNumber: string | null;
}

export function orderView(order: Order): OrderView {
  return {
    id: Number(order.id),
    sku: order.sku,
    quantity: order.quantity,
    status: order.status,
    trackingNumber: order.tracking_number,
  };
}

@Injectable()
export class OrdersService {
  constructor(
    @Inject(KYSELY) private readonly db: Kysely<OrdersDatabase>,
    @Inject(WAREHOUSE) private readonly warehouse: WarehouseClient,
    private readonly phases: PhaseRunner,
  ) {}

  /**
   * The order and its 'placed' event. Under `@Idempotent()` both commit with the stored 201,
   * or neither does; the event's transaction is a savepoint of the request's.
   */
  async place(dto: CreateOrderDto, hold?: Hold) {
    const order = await this.db
      .insertInto('orders')
      .values({ sku: dto.sku, quantity: dto.quantity, status: 'placed' })
      .returningAll()
      .executeTakeFirstOrThrow();
    await this.db
      .transaction()
      .execute((trx) =>
        trx.insertInto('order_events').values({ order_id: order.id, kind: 'placed' }).execute(),
      );
    await holdAt('placed', hold);
    return { id: Number(order.id), sku: order.sku, quantity: order.quantity, status: 'placed' };
  }

  /**
   * Ships an order in two atomic phases and a finish. A worker that takes a crashed request
   * over runs this again: 'reserved' gives back its stored result, and the warehouse is called
   * again with the same derived key, so it ships once.
   */
  async ship(id: string, hold?: Hold) {
    const order = await this.find(id);
    if (!order) throw new NotFoundException(`no order ${id}`);

    await this.phases.run('reserved', async () => {
      // Kysely on the app's pool: its queries join the phase's transaction (the phase's first
      // argument is TypeORM's EntityManager, not used here).
      await this.db
        .updateTable('orders')
        .set({ status: 'reserved' })
        .where('id', '=', order.id)
        .execute();
      await this.db
        .insertInto('order_events')
        .values({ order_id: order.id, kind: 'reserved' })
        .execute();
      await holdAt('reserving', hold);
      return { reserved: true };
    });
    await holdAt('reserved', hold);

    // The warehouse, with no transaction open; then its answer, recorded with the phase.
    const { trackingNumber } = await this.phases.call(
      'shipped',
      ({ idempotencyKey }) => this.warehouse.ship(order, idempotencyKey),
      async (_manager, shipment) => {
        await this.db
          .updateTable('orders')
          .set({ tracking_number: shipment.trackingNumber })
          .where('id', '=', order.id)
          .execute();
        await this.db
          .insertInto('order_events')
          .values({ order_id: order.id, kind: 'shipped' })
          .execute();
        return { trackingNumber: shipment.trackingNumber };
      },
    );

    return this.phases.finish(async () => {
      await this.db
        .updateTable('orders')
        .set({ status: 'shipped' })
        .where('id', '=', order.id)
        .execute();
      return { id: Number(order.id), status: 'shipped', trackingNumber };
    });
  }

  async find(id: string): Promise<Order | undefined> {
    if (!/^\d{1,18}$/.test(id)) return undefined;
    return this.db.selectFrom('orders').selectAll().where('id', '=', id).executeTakeFirst();
  }
}
