-- The app's own tables, as the schema above maps them (orders, order_events)
CREATE TABLE orders (
  id              bigserial PRIMARY KEY,
  sku             text NOT NULL,
  quantity        int  NOT NULL,
  status          text NOT NULL,
  tracking_number text
);

CREATE TABLE order_events (
  id       bigserial PRIMARY KEY,
  order_id bigint REFERENCES orders,
  kind     text NOT NULL,
  UNIQUE (order_id, kind)
);
