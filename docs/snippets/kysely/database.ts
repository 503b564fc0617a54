// database.ts: one pg.Pool for the app; Kysely runs on it, and so does the idempotency module.
import { type Generated, Kysely, PostgresDialect } from 'kysely';
import { Pool } from 'pg';

export interface Database {
  orders: { id: Generated<string>; sku: string; quantity: number; status: string };
  order_events: { id: Generated<string>; order_id: string; kind: string };
}

export const PG_POOL = Symbol('PG_POOL');
export const KYSELY = Symbol('KYSELY');

export const pool = new Pool({ connectionString: process.env.DATABASE_URL });
export const db = new Kysely<Database>({ dialect: new PostgresDialect({ pool }) });
