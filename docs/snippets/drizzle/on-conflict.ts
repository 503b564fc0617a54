import { type Database } from './database.js';
import { orderEvents } from './schema.js';

// A unique violation caught around a plain insert aborts the request's transaction (500
// transaction_aborted). Say "already there" in SQL, or nest the insert in db.transaction().
export async function recordOnce(db: Database, orderId: number, kind: string): Promise<boolean> {
  const inserted = await db
    .insert(orderEvents)
    .values({ orderId, kind })
    .onConflictDoNothing()
    .returning({ id: orderEvents.id });
  return inserted.length > 0;
}
