/**
 * The fake PSP as its own process for `npm run soak`, which turns it slow with SIGUSR2 and
 * back with SIGUSR1 (the fake keeps its authorizations in memory, so it must not restart).
 */
import { startFakePsp } from '../sample-app/psp/fake-psp.js';

const psp = await startFakePsp({ port: Number(process.env.PSP_PORT ?? 0) });
const slowMs = Number(process.env.PSP_SLOW_MS ?? 3000);
process.on('SIGUSR2', () => (psp.delayMs = slowMs));
process.on('SIGUSR1', () => (psp.delayMs = 0));
process.once('SIGTERM', () => void psp.close().then(() => process.exit(0)));
console.log(`listening on ${psp.port}`);
