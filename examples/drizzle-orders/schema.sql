-- The orders service's tables. Applied at start-up after the library's own
-- (migrations/schema.sql), under an advisory lock: several instances may start at once.
CREATE TABLE IF NOT EXISTS orders (
  id              bigserial PRIMARY KEY,
  sku             text NOT NULL,
  quantity        int  NOT NULL CHECK (quantity > 0),
  status          text NOT NULL,
  tracking_number text
);
CREATE INDEX IF NOT EXISTS orders_sku_idx ON orders (sku);

CREATE TABLE IF NOT EXISTS order_events (
  id       bigserial PRIMARY KEY,
  order_id bigint NOT NULL REFERENCES orders,
  kind     text   NOT NULL,
  UNIQUE (order_id, kind)
);
