import { type Generated, type Insertable, Kysely, PostgresDialect, type Selectable } from 'kysely';
import { Pool } from 'pg';

/** The `orders` table as Kysely sees it (bigint ids come back from node-postgres as strings). */
export interface OrdersTable {
  id: Generated<string>;
  sku: string;
  quantity: number;
  status: string;
  tracking_number: string | null;
}

export interface OrderEventsTable {
  id: Generated<string>;
  order_id: string;
  kind: string;
}

export interface OrdersDatabase {
  orders: OrdersTable;
  order_events: OrderEventsTable;
}

export type Order = Selectable<OrdersTable>;
export type NewOrderEvent = Insertable<OrderEventsTable>;

/** The one `pg.Pool` of the app: the library's store, and the pool Kysely runs on. */
export const PG_POOL = Symbol('PG_POOL');
/** The app's `Kysely<OrdersDatabase>`, built on `PG_POOL`. */
export const KYSELY = Symbol('KYSELY');

/**
 * The pool and Kysely on it. Kysely takes a client from this pool for each query; inside an
 * `@Idempotent()` request each of those clients is the request's connection, so every query
 * joins the request's transaction.
 */
export function createDatabase(databaseUrl: string): { pool: Pool; db: Kysely<OrdersDatabase> } {
  // A database that does not answer is a prompt 503, never a hung request.
  const pool = new Pool({ connectionString: databaseUrl, connectionTimeoutMillis: 5000 });
  const db = new Kysely<OrdersDatabase>({ dialect: new PostgresDialect({ pool }) });
  return { pool, db };
}
