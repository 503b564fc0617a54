/**
 * The fuzzer's app as a process of its own, so that the fuzzer can kill it with SIGKILL in the
 * middle of a handler. Started by `fuzz-runner.ts` from the compiled file.
 */
import { type AdapterName } from '../support/bootstrap.js';
import { type LayerName } from './data-layers.js';
import { createFuzzApp, type TransportName } from './fuzz-app.js';

const url = process.env.DATABASE_URL;
if (!url) throw new Error('DATABASE_URL is required');
const app = await createFuzzApp({
  databaseUrl: url,
  adapter: (process.env.ADAPTER ?? 'express') as AdapterName,
  layer: (process.env.LAYER ?? 'typeorm') as LayerName,
  transport: (process.env.TRANSPORT ?? 'http') as TransportName,
  leaseMs: Number(process.env.LEASE_MS ?? 1500),
  defaultSerializable: process.env.DEFAULT_SERIALIZABLE === '1',
  queue: process.env.QUEUE,
  redisUrl: process.env.REDIS_URL,
  plainJobs: process.env.PLAIN_JOBS === '1',
});
await app.listen(0, '127.0.0.1');
const address = app.getHttpServer().address() as { port: number };
console.log(`listening on ${address.port}`);
