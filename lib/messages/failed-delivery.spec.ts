import { afterFailure, type DeliveryFailures, type FailedDelivery } from './failed-delivery.js';

describe('afterFailure (maxAttempts 3)', () => {
  const redeliver = (delayMs: number): FailedDelivery => ({ action: 'redeliver', delayMs });
  const giveUp = (attempts: number): FailedDelivery => ({ action: 'give-up', attempts });
  it.each<[string, DeliveryFailures, FailedDelivery]>([
    [
      'counted, under the bound: at once',
      { passing: false, counted: 1, seen: 1, failures: 1 },
      redeliver(0),
    ],
    ['counted, at the bound', { passing: false, counted: 3, seen: 1, failures: 1 }, giveUp(3)],
    [
      'counted past it (other consumers)',
      { passing: false, counted: 7, seen: 1, failures: 1 },
      giveUp(7),
    ],
    [
      'not counted, first: backoff',
      { passing: false, counted: undefined, seen: 1, failures: 1 },
      redeliver(100),
    ],
    [
      'not counted, second: doubled',
      { passing: false, counted: undefined, seen: 2, failures: 2 },
      redeliver(200),
    ],
    [
      'not counted, third: the floor gives up',
      { passing: false, counted: undefined, seen: 3, failures: 3 },
      giveUp(3),
    ],
    [
      'a count behind this process’s: the floor',
      { passing: false, counted: 1, seen: 3, failures: 3 },
      giveUp(3),
    ],
    [
      'passing: never given up, backoff',
      { passing: true, counted: undefined, seen: 0, failures: 1 },
      redeliver(100),
    ],
    [
      'passing, many times: capped at 5 s',
      { passing: true, counted: undefined, seen: 9, failures: 30 },
      redeliver(5000),
    ],
    [
      'passing after countable ones: still not given up',
      { passing: true, counted: undefined, seen: 5, failures: 6 },
      redeliver(3200),
    ],
  ])('%s', (_name, failures, expected) => {
    expect(afterFailure(failures, 3)).toEqual(expected);
  });
});
