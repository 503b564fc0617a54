import 'reflect-metadata';
import { Pool } from 'pg';
import { createOrdersApp, type OrdersAdapter } from './create-app.js';
import { migrate } from './database/migrate.js';

/**
 * The orders service as a process: `DATABASE_URL` and `WAREHOUSE_URL` are required; `PORT`
 * (0: any free port), `HTTP_ADAPTER` (express or fastify), `IDEMPOTENCY_LEASE_MS`,
 * `IDEMPOTENCY_HEARTBEAT` (true or false), `REQUEST_TIMEOUT_MS` are optional, and
 * `ORDERS_TEST_HOOKS=1` turns on the test-only slow points (orders/test-hooks.ts), and
 * `ORDERS_PRISMA_OWN_POOL=1` is the e2e suite's control (Prisma on a pool of its own).
 */
const env = process.env;
const required = (name: string) => {
  const value = env[name];
  if (!value) throw new Error(`${name} is required`);
  return value;
};
const databaseUrl = required('DATABASE_URL');

const pool = new Pool({ connectionString: databaseUrl, max: 2 });
await migrate(pool);
await pool.end();

const app = await createOrdersApp(
  {
    databaseUrl,
    warehouseUrl: required('WAREHOUSE_URL'),
    ...(env.IDEMPOTENCY_LEASE_MS ? { leaseMs: Number(env.IDEMPOTENCY_LEASE_MS) } : {}),
    ...(env.IDEMPOTENCY_HEARTBEAT ? { heartbeat: env.IDEMPOTENCY_HEARTBEAT === 'true' } : {}),
    requestTimeoutMs: Number(env.REQUEST_TIMEOUT_MS ?? 0),
    testHooks: env.ORDERS_TEST_HOOKS === '1',
    prismaOnOwnPool: env.ORDERS_PRISMA_OWN_POOL === '1',
  },
  (env.HTTP_ADAPTER ?? 'express') as OrdersAdapter,
);
await app.listen(Number(env.PORT ?? 0), '127.0.0.1');
const address = app.getHttpServer().address() as { port: number };
console.log(`listening on ${address.port}`);
