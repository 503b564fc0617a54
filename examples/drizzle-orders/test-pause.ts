import { AsyncLocalStorage } from 'node:async_hooks';

/**
 * Where a test may hold a request (to kill its process there, or to let its lease run out),
 * by name, for how many milliseconds. Set only by the tests' worker
 * (test/examples/support/drizzle-orders-worker.ts) from a request header; the app's own
 * main.ts never sets it, so in the app every pause is a no-op.
 */
export const testPauses = new AsyncLocalStorage<ReadonlyMap<string, number>>();

export type PausePoint = 'after-read' | 'after-order' | 'after-writes' | 'after-reserved';

export async function testPause(point: PausePoint): Promise<void> {
  const ms = testPauses.getStore()?.get(point);
  if (ms) await new Promise((resolve) => setTimeout(resolve, ms));
}
