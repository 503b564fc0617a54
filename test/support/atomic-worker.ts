/**
 * The atomic test app as a process of its own, so a test can kill it with SIGKILL while a
 * handler's transaction is open. Started by `worker-process.ts` from the compiled file.
 */
import { createAtomicApp } from './atomic-app.js';

const url = process.env.DATABASE_URL;
if (!url) throw new Error('DATABASE_URL is required');
const app = await createAtomicApp({
  databaseUrl: url,
  adapter: 'express',
  idempotency: { leaseMs: Number(process.env.LEASE_MS ?? 60_000) },
});
await app.listen(Number(process.env.PORT ?? 0), '127.0.0.1');
const address = app.getHttpServer().address() as { port: number };
console.log(`listening on ${address.port}`);
