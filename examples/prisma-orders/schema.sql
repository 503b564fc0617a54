-- The orders service's own tables (the library's are migrations/schema.sql). Applied at start-up
-- by main.ts; idempotent, so that every instance may run it.
CREATE TABLE IF NOT EXISTS orders (
  id bigserial PRIMARY KEY,
  sku text NOT NULL,
  quantity int NOT NULL CHECK (quantity > 0),
  status text NOT NULL,
  tracking_number text
);
CREATE TABLE IF NOT EXISTS order_events (
  id bigserial PRIMARY KEY,
  order_id bigint REFERENCES orders,
  kind text NOT NULL,
  UNIQUE (order_id, kind)
);
