-- The app's own tables, as the Database interface above types them
CREATE TABLE orders (
  id       bigserial PRIMARY KEY,
  sku      text NOT NULL,
  quantity int  NOT NULL,
  status   text NOT NULL
);

CREATE TABLE order_events (
  id       bigserial PRIMARY KEY,
  order_id bigint NOT NULL REFERENCES orders,
  kind     text   NOT NULL,
  UNIQUE (order_id, kind)
);
