import { detachMode } from './detach-mode.js';
import { type PoolerMode } from '../../shapes/idempotency-options.interface.js';

describe('detachMode', () => {
  it.each<[PoolerMode, boolean, boolean, string]>([
    ['session', false, false, 'concurrently'],
    ['none', false, false, 'concurrently'],
    ['transaction', false, false, 'locked'],
    ['session', true, false, 'locked'],
    ['none', true, false, 'locked'],
    ['transaction', true, false, 'locked'],
    // Another role's detach left pending: no CONCURRENTLY detach is possible beside it.
    ['session', false, true, 'locked'],
    ['none', false, true, 'locked'],
    ['transaction', false, true, 'locked'],
    ['none', true, true, 'locked'],
  ])(
    "pooler %s, a DEFAULT partition %s, another role's pending detach %s: %s",
    (pooler, hasDefault, otherPending, expected) => {
      expect(detachMode(pooler, hasDefault, otherPending)).toBe(expected);
    },
  );
});
