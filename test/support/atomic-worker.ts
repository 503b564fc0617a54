/**
 * The atomic test app as a process of its own, so a test can kill it with SIGKILL while a
 * handler's transaction is open. Started by `worker-process.ts` from the compiled file.
 * LEASE_MS, HEARTBEAT and ONE_COMMIT (`true`/`false`) set those options; unset, the module's
 * defaults apply. ADAPTER: `express` (the default) or `fastify`.
 */
import { type AdapterName } from './bootstrap.js';
import { createAtomicApp } from './atomic-app.js';

const url = process.env.DATABASE_URL;
if (!url) throw new Error('DATABASE_URL is required');
const { LEASE_MS, HEARTBEAT, ONE_COMMIT } = process.env;
const app = await createAtomicApp({
  databaseUrl: url,
  adapter: (process.env.ADAPTER ?? 'express') as AdapterName,
  idempotency: {
    ...(LEASE_MS ? { leaseMs: Number(LEASE_MS) } : {}),
    ...(HEARTBEAT ? { heartbeat: HEARTBEAT === 'true' } : {}),
    ...(ONE_COMMIT ? { oneCommit: ONE_COMMIT === 'true' } : {}),
  },
});
await app.listen(Number(process.env.PORT ?? 0), '127.0.0.1');
const address = app.getHttpServer().address() as { port: number };
console.log(`listening on ${address.port}`);
