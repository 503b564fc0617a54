-- The orders service's own tables. main.ts applies this file (and the library's
-- migrations/schema.sql) at start-up when they are missing, under an advisory lock, so that
-- several instances may start at once.

CREATE TABLE orders (
  id              bigserial PRIMARY KEY,
  sku             text      NOT NULL,
  quantity        int       NOT NULL CHECK (quantity > 0),
  status          text      NOT NULL,
  tracking_number text
);

CREATE TABLE order_events (
  id       bigserial PRIMARY KEY,
  order_id bigint    NOT NULL REFERENCES orders,
  kind     text      NOT NULL,
  UNIQUE (order_id, kind)
);
