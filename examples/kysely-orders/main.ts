import 'reflect-metadata';
import { Pool } from 'pg';
import { createOrdersApp, type HttpAdapterName } from './create-app.js';
import { applySchema } from './schema.js';

/**
 * PORT (0: any free port), DATABASE_URL, WAREHOUSE_URL; LEASE_MS, HEARTBEAT (`true`/`false`),
 * REQUEST_TIMEOUT_MS, HTTP_ADAPTER (`express`/`fastify`); ORDERS_TEST_HOOKS=true for tests.
 */
async function main(): Promise<void> {
  const env = process.env;
  const databaseUrl = env.DATABASE_URL;
  const warehouseUrl = env.WAREHOUSE_URL;
  if (!databaseUrl || !warehouseUrl) {
    throw new Error('Set DATABASE_URL and WAREHOUSE_URL');
  }
  // The schema, on a pool of its own that is gone before the app starts.
  const schemaPool = new Pool({ connectionString: databaseUrl });
  await applySchema(schemaPool);
  await schemaPool.end();

  const app = await createOrdersApp(
    {
      databaseUrl,
      warehouseUrl,
      ...(env.LEASE_MS ? { leaseMs: Number(env.LEASE_MS) } : {}),
      ...(env.HEARTBEAT ? { heartbeat: env.HEARTBEAT === 'true' } : {}),
      ...(env.REQUEST_TIMEOUT_MS ? { requestTimeoutMs: Number(env.REQUEST_TIMEOUT_MS) } : {}),
      testHooks: env.ORDERS_TEST_HOOKS === 'true',
    },
    (env.HTTP_ADAPTER ?? 'express') as HttpAdapterName,
  );
  app.enableShutdownHooks(['SIGTERM', 'SIGINT']);
  await app.listen(Number(env.PORT ?? 3000), '127.0.0.1');
  const { port } = app.getHttpServer().address() as { port: number };
  console.log(`listening on ${port}`);
}

main().catch((error: unknown) => {
  console.error(error);
  process.exit(1);
});
