import { Inject, Injectable } from '@nestjs/common';
import { type Database, DRIZZLE } from './database.js';
import { orderEvents, orders } from './schema.js';

@Injectable()
export class OrdersService {
  constructor(@Inject(DRIZZLE) private readonly db: Database) {}

  // On an @Idempotent() route all of this commits with the stored 201, or none of it does.
  async place(sku: string, quantity: number) {
    const [order] = await this.db
      .insert(orders)
      .values({ sku, quantity, status: 'placed' })
      .returning();
    // A nested transaction: a savepoint of the request's transaction.
    await this.db.transaction(async (tx) => {
      await tx.insert(orderEvents).values({ orderId: order.id, kind: 'placed' });
    });
    return order;
  }
}
