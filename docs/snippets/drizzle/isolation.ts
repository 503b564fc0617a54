import { eq, sql } from 'drizzle-orm';
import { type Database } from './database.js';
import { orders } from './schema.js';

// As the handler's first database work, this begins the request's transaction at
// SERIALIZABLE; a serialization failure is answered 503 database_transient, and the
// client's retry runs the request again.
export function placeIfInStock(db: Database, sku: string, quantity: number, stock: number) {
  return db.transaction(
    async (tx) => {
      const [{ ordered }] = await tx
        .select({ ordered: sql<number>`coalesce(sum(${orders.quantity}), 0)::int` })
        .from(orders)
        .where(eq(orders.sku, sku));
      if (ordered + quantity > stock) return undefined;
      const [order] = await tx
        .insert(orders)
        .values({ sku, quantity, status: 'placed' })
        .returning();
      return order;
    },
    { isolationLevel: 'serializable' },
  );
}
