/**
 * Slow and faulty points that the e2e tests drive through request headers, honoured only when
 * the app is started with them on (`ORDERS_TEST_HOOKS=1`): a production instance ignores them.
 */
export const TEST_HOOKS = 'ORDERS_TEST_HOOKS';

export interface TestHooks {
  /** `x-test-hold-ms`: wait this long after the order's writes, before answering. */
  holdMs: number;
  /** `x-test-swallow`: insert the 'placed' event twice, and catch the unique violation. */
  swallow: boolean;
}

export const NO_HOOKS: TestHooks = { holdMs: 0, swallow: false };

export function readTestHooks(
  enabled: boolean,
  headers: Record<string, string | string[] | undefined>,
): TestHooks {
  if (!enabled) return NO_HOOKS;
  const hold = Number(headers['x-test-hold-ms'] ?? 0);
  return {
    holdMs: Number.isFinite(hold) && hold > 0 ? hold : 0,
    swallow: headers['x-test-swallow'] === '1',
  };
}
