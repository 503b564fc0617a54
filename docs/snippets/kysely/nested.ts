import { type Kysely } from 'kysely';
import { type Database } from './database.js';

// Inside an @Idempotent() handler, each of these is a savepoint of the request's transaction.
export async function nested(db: Kysely<Database>, orderId: string) {
  // Throws after its write, caught: its write rolls back alone; the request goes on.
  await db
    .transaction()
    .execute(async (trx) => {
      await trx.insertInto('order_events').values({ order_id: orderId, kind: 'gift' }).execute();
      throw new Error('no gift wrap today');
    })
    .catch(() => undefined);

  // A controlled transaction: commit() releases its savepoint; nothing commits before the
  // request's answer does.
  const trx = await db.startTransaction().execute();
  await trx.insertInto('order_events').values({ order_id: orderId, kind: 'noted' }).execute();
  const checkpoint = await trx.savepoint('before_audit').execute();
  await checkpoint
    .insertInto('order_events')
    .values({ order_id: orderId, kind: 'audit' })
    .execute();
  await checkpoint.rollbackToSavepoint('before_audit').execute();
  await trx.commit().execute();

  // Parallel queries: Kysely takes a pool client for each; all are the request's connection.
  await Promise.all([
    db.selectFrom('orders').selectAll().where('id', '=', orderId).execute(),
    db.selectFrom('order_events').selectAll().where('order_id', '=', orderId).execute(),
  ]);
}

// As the handler's first database work: the request's transaction begins SERIALIZABLE.
export function serializable(db: Kysely<Database>, sku: string) {
  return db
    .transaction()
    .setIsolationLevel('serializable')
    .execute(async (trx) => {
      const taken = await trx.selectFrom('orders').select('id').where('sku', '=', sku).execute();
      if (taken.length > 0) return { placed: false };
      await trx.insertInto('orders').values({ sku, quantity: 1, status: 'placed' }).execute();
      return { placed: true };
    });
}
