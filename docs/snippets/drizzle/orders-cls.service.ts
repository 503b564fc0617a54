import { Injectable } from '@nestjs/common';
import { Transactional, TransactionHost } from '@nestjs-cls/transactional';
import { type TransactionalAdapterDrizzleOrm } from '@nestjs-cls/transactional-adapter-drizzle-orm';
import { type Database } from './database.js';
import { orderEvents, orders } from './schema.js';

@Injectable()
export class OrdersService {
  constructor(private readonly txHost: TransactionHost<TransactionalAdapterDrizzleOrm<Database>>) {}

  // On an @Idempotent() route this is a savepoint of the request's transaction (so is
  // Propagation.RequiresNew): it commits with the stored answer, or not at all.
  @Transactional()
  async place(sku: string, quantity: number) {
    const [order] = await this.txHost.tx
      .insert(orders)
      .values({ sku, quantity, status: 'placed' })
      .returning();
    await this.txHost.tx.insert(orderEvents).values({ orderId: order.id, kind: 'placed' });
    return order;
  }
}
