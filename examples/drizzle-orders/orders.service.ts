import { ConflictException, Inject, Injectable, NotFoundException } from '@nestjs/common';
import { and, eq, inArray, sql } from 'drizzle-orm';
import { CreateOrderDto } from './create-order.dto.js';
import { type Database, DRIZZLE } from './database.js';
import { orderEvents, orders, type Order } from './schema.js';
import { testPause } from './test-pause.js';

/** How many units of one sku can be ordered in all: a stand-in for a stock table. */
export const STOCK_PER_SKU = 1000;

export interface OrderView {
  id: number;
  sku: string;
  quantity: number;
  status: string;
}

const view = ({ id, sku, quantity, status }: Order): OrderView => ({ id, sku, quantity, status });

/**
 * The orders, through Drizzle on the app's one pool. Nothing here knows about idempotency:
 * inside an @Idempotent() request every statement joins the request's transaction, and
 * `db.transaction()` is a savepoint of it.
 */
@Injectable()
export class OrdersService {
  constructor(@Inject(DRIZZLE) private readonly db: Database) {}

  /**
   * Places an order if the sku has stock left. SERIALIZABLE, so that two orders of the last
   * units cannot both pass the check: one of them fails with a serialization failure, which
   * the library answers 503 with nothing committed, and the client's retry runs it again.
   */
  place(dto: CreateOrderDto): Promise<OrderView> {
    return this.db.transaction(
      async (tx) => {
        const [{ ordered }] = await tx
          .select({ ordered: sql<number>`coalesce(sum(${orders.quantity}), 0)::int` })
          .from(orders)
          .where(eq(orders.sku, dto.sku));
        if (ordered + dto.quantity > STOCK_PER_SKU) {
          throw new ConflictException(`${dto.sku} is out of stock`);
        }
        await testPause('after-read');
        const [order] = await tx
          .insert(orders)
          .values({ sku: dto.sku, quantity: dto.quantity, status: 'placed' })
          .returning();
        await testPause('after-order');
        // A nested transaction (a savepoint): it commits with the order, or neither does.
        await tx.transaction((nested) =>
          nested.insert(orderEvents).values({ orderId: order.id, kind: 'placed' }),
        );
        return view(order);
      },
      { isolationLevel: 'serializable' },
    );
  }

  /** Marks a placed order reserved for shipping (again, on a retry: the same outcome). */
  async reserve(id: number): Promise<void> {
    const updated = await this.db
      .update(orders)
      .set({ status: 'reserved' })
      .where(and(eq(orders.id, id), inArray(orders.status, ['placed', 'reserved'])))
      .returning({ id: orders.id });
    if (updated.length === 0) {
      const order = await this.get(id);
      throw new ConflictException(`order ${id} is already ${order.status}`);
    }
  }

  async ship(id: number, trackingNumber: string): Promise<void> {
    await this.db
      .update(orders)
      .set({ status: 'shipped', trackingNumber })
      .where(eq(orders.id, id));
    await this.db.insert(orderEvents).values({ orderId: id, kind: 'shipped' });
  }

  async get(id: number): Promise<Order> {
    const order = await this.db.query.orders.findFirst({ where: eq(orders.id, id) });
    if (!order) throw new NotFoundException(`no order ${id}`);
    return order;
  }
}
