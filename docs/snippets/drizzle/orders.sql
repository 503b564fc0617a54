-- The app's own tables, as the schema above declares them (or as drizzle-kit makes them)
CREATE TABLE orders (
  id              bigserial PRIMARY KEY,
  sku             text NOT NULL,
  quantity        int  NOT NULL,
  status          text NOT NULL,
  tracking_number text
);

CREATE TABLE order_events (
  id       bigserial PRIMARY KEY,
  order_id bigint NOT NULL REFERENCES orders,
  kind     text   NOT NULL,
  UNIQUE (order_id, kind)
);
