/**
 * Preloaded into the bench app by `bench/app-cpu-per-key.ts` (`node --expose-gc
 * --min-semi-space-size=64 --max-semi-space-size=64 --import dist/bench/support/heap-marks.js ...`): on SIGUSR2 it
 * prints one line, `heap-mark {"heap":..,"gcs":..,"cpu":..}`, with the JS heap in use, the
 * garbage collections since the last mark and the process's CPU time (µs), then collects the
 * garbage, so the next mark's `heap` minus this one's `after` is what the requests between them
 * allocated (exact while `gcs` is 0: the young generation is made large enough for that).
 */
import { PerformanceObserver } from 'node:perf_hooks';
import { getHeapStatistics } from 'node:v8';

let gcs = 0;
new PerformanceObserver((list) => {
  gcs += list.getEntries().length;
}).observe({ entryTypes: ['gc'] });

const collect = (globalThis as { gc?: () => void }).gc;

process.on('SIGUSR2', () => {
  const heap = getHeapStatistics().used_heap_size;
  const { user, system } = process.cpuUsage();
  const seen = gcs;
  collect?.();
  // The observer reports the forced collection later; it is not the requests'.
  gcs = -1;
  const after = getHeapStatistics().used_heap_size;
  process.stdout.write(
    `heap-mark ${JSON.stringify({ heap, after, gcs: seen, cpu: user + system })}\n`,
  );
});
