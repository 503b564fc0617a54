/**
 * The phase app as a process of its own, so a test can kill it with SIGKILL mid-request.
 * Started by `test/support/worker-process.ts` from the compiled file in dist/.
 */
import { createPhaseApp } from './phase-app.js';

const env = (name: string) => {
  const value = process.env[name];
  if (!value) throw new Error(`${name} is required`);
  return value;
};

const app = await createPhaseApp({
  databaseUrl: env('DATABASE_URL'),
  pspUrl: env('PSP_URL'),
  leaseMs: Number(env('LEASE_MS')),
  worker: env('WORKER'),
  phaseThreeDelayMs: Number(process.env.PHASE_THREE_DELAY_MS ?? 0),
  recordDelayMs: Number(process.env.RECORD_DELAY_MS ?? 0),
});
await app.listen(Number(process.env.PORT ?? 0), '127.0.0.1');
const address = app.getHttpServer().address() as { port: number };
console.log(`listening on ${address.port}`);
