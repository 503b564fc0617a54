/** The points of a request at which a test may hold it. */
export type HoldPoint = 'placed' | 'reserving' | 'reserved';

/** Where and how long a test holds a request: from its `X-Test-Hold` header. */
export interface Hold {
  point: HoldPoint;
  ms: number;
}

/**
 * For tests only, and only in an app built with `testHooks` (ORDERS_TEST_HOOKS=true):
 * `X-Test-Hold: placed=3000` holds `POST /orders` 3 s after its writes, before it answers;
 * `reserving=3000` holds `POST /orders/:id/ship` inside its 'reserved' phase, after the
 * phase's writes; `reserved=3000` after the phase. A test kills the process, or takes the lease
 * over, in that window.
 */
export function readHold(enabled: boolean, header: string | undefined): Hold | undefined {
  const match = enabled && header ? /^(placed|reserving|reserved)=(\d+)$/.exec(header) : null;
  return match ? { point: match[1] as HoldPoint, ms: Number(match[2]) } : undefined;
}

/** Waits when `hold` is at `point`. */
export async function holdAt(point: HoldPoint, hold: Hold | undefined): Promise<void> {
  if (hold?.point === point) await new Promise((resolve) => setTimeout(resolve, hold.ms));
}
