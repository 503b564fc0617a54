import { startFakePsp } from './fake-psp.js';

/** `npm run psp`: the fake PSP as a process of its own, so it outlives a killed app. */
const port = Number(process.env.PSP_PORT ?? 4010);
const delayMs = Number(process.env.PSP_DELAY_MS ?? 0);
if (!Number.isSafeInteger(port) || port < 0 || !Number.isSafeInteger(delayMs) || delayMs < 0) {
  console.error('PSP_PORT and PSP_DELAY_MS must be non-negative integers');
  process.exit(1);
}
const psp = await startFakePsp({ port, delayMs, host: '0.0.0.0' });
console.log(`listening on ${psp.port}`);
const stop = () => void psp.close().then(() => process.exit(0));
process.once('SIGTERM', stop);
process.once('SIGINT', stop);
