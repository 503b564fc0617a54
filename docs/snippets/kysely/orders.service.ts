import { Inject, Injectable } from '@nestjs/common';
import { type Kysely } from 'kysely';
import { type Database, KYSELY } from './database.js';

export interface CreateOrderDto {
  sku: string;
  quantity: number;
}

@Injectable()
export class OrdersService {
  constructor(@Inject(KYSELY) private readonly db: Kysely<Database>) {}

  async place(dto: CreateOrderDto) {
    // Under @Idempotent(): the request's transaction, opened by this first write.
    const order = await this.db
      .insertInto('orders')
      .values({ ...dto, status: 'placed' })
      .returningAll()
      .executeTakeFirstOrThrow();
    // Kysely's own transaction: a savepoint of the request's. Both writes commit with the
    // stored 201, or neither does.
    await this.db
      .transaction()
      .execute((trx) =>
        trx.insertInto('order_events').values({ order_id: order.id, kind: 'placed' }).execute(),
      );
    return { id: order.id, sku: order.sku, quantity: order.quantity, status: order.status };
  }
}
