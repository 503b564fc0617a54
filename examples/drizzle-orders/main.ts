/**
 * The orders service as a process: `DATABASE_URL` and `WAREHOUSE_URL` (required), `PORT`
 * (3000; 0 picks a free one), `ADAPTER` (`express` or `fastify`), `LEASE_MS` and `HEARTBEAT`
 * (`true`/`false`, the library's defaults when unset). Prints `listening on <port>` when ready.
 */
import 'reflect-metadata';
import { Pool } from 'pg';
import { OrdersAppModule } from './app.module.js';
import { type AdapterName, createApp } from './create-app.js';
import { applySchema } from './database.js';

const { DATABASE_URL, WAREHOUSE_URL, PORT, ADAPTER, LEASE_MS, HEARTBEAT } = process.env;
if (!DATABASE_URL || !WAREHOUSE_URL) {
  console.error('configuration: DATABASE_URL and WAREHOUSE_URL are required');
  process.exit(1);
}

const pool = new Pool({ connectionString: DATABASE_URL });
// An idle connection that fails (a restarted server) is dropped by the pool; without a
// listener its 'error' would end the process.
pool.on('error', (error) => console.error(`an idle database connection failed: ${error.message}`));
await applySchema(pool);

const app = await createApp(
  OrdersAppModule.register({
    pool,
    warehouseUrl: WAREHOUSE_URL,
    ...(LEASE_MS ? { leaseMs: Number(LEASE_MS) } : {}),
    ...(HEARTBEAT ? { heartbeat: HEARTBEAT === 'true' } : {}),
  }),
  (ADAPTER ?? 'express') as AdapterName,
);

let stopping = false;
const stop = async () => {
  if (stopping) return;
  stopping = true;
  await app.close(); // the HTTP server first, then the pool the app's requests used
  await pool.end();
  process.exit(0);
};
process.once('SIGTERM', () => void stop());
process.once('SIGINT', () => void stop());

await app.listen(Number(PORT ?? 3000), '0.0.0.0');
console.log(`listening on ${(app.getHttpServer().address() as { port: number }).port}`);
