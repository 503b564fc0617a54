import { bigint, bigserial, integer, pgTable, text, unique } from 'drizzle-orm/pg-core';

export const orders = pgTable('orders', {
  id: bigserial('id', { mode: 'number' }).primaryKey(),
  sku: text('sku').notNull(),
  quantity: integer('quantity').notNull(),
  status: text('status').notNull(),
  trackingNumber: text('tracking_number'),
});

export const orderEvents = pgTable(
  'order_events',
  {
    id: bigserial('id', { mode: 'number' }).primaryKey(),
    orderId: bigint('order_id', { mode: 'number' })
      .notNull()
      .references(() => orders.id),
    kind: text('kind').notNull(),
  },
  (table) => [unique().on(table.orderId, table.kind)],
);
