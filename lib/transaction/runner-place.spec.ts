import {
  placeOfRunner,
  type RunnerHeld,
  type RunnerPlace,
  type RunnerScope,
} from './runner-place.js';

describe('placeOfRunner: where a runner made outside the transaction it is used in runs (adversary 88, 90, 96)', () => {
  it.each<[string, RunnerHeld, RunnerScope, RunnerPlace]>([
    ['outside every scope', 'plain', 'none', 'itself'],
    ['in the request’s open transaction', 'plain', 'open', 'join'],
    ['first used after its request ended: waits, apart or refused', 'plain', 'ended', 'after-end'],
    ['before the handler started (a pipe, an interceptor)', 'plain', 'later', 'itself'],
    ['in a scope that joins nothing', 'plain', 'apart', 'itself'],
    ['its own transaction open, in an open request', 'own-transaction', 'open', 'itself'],
    ['its own transaction open, after the end', 'own-transaction', 'ended', 'itself'],
    [
      'connected by a guard, in an open request: refused, its session cannot be placed',
      'connected',
      'open',
      'refuse',
    ],
    ['connected, before the handler started (the guard itself)', 'connected', 'later', 'itself'],
    ['connected, in a scope that joins nothing', 'connected', 'apart', 'itself'],
    ['its own transaction open, outside every scope', 'own-transaction', 'none', 'itself'],
    ['connected, used after the end (work left running): refused', 'connected', 'ended', 'refuse'],
    ['connected, outside every scope', 'connected', 'none', 'itself'],
  ])('%s', (_name, held, scope, expected) => {
    expect(placeOfRunner(held, scope)).toBe(expected);
  });
});
