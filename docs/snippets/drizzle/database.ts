// database.ts: the Drizzle token and type the module, services and controllers share. A file
// of its own: declared in app.module.ts, which imports the controllers and services that
// import it back, it is read before it is set, and the app crashes at start ("Cannot access
// 'DRIZZLE' before initialization").
import { type NodePgDatabase } from 'drizzle-orm/node-postgres';
import type * as schema from './schema.js';

export const DRIZZLE = Symbol('DRIZZLE');
export type Database = NodePgDatabase<typeof schema>;
