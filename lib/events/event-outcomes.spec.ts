import { debugLine, metricPoints } from './event-outcomes.js';

describe('metricPoints', () => {
  const route = 'Charges.create';
  it.each<[string, Parameters<typeof metricPoints>, ReturnType<typeof metricPoints>]>([
    [
      'a claim, with the time to decide',
      ['claimed', { route, durationMs: 1.5 }],
      {
        outcome: { attributes: { 'idempotency.outcome': 'claimed', 'idempotency.route': route } },
        duration: {
          ms: 1.5,
          attributes: { 'idempotency.step': 'decide', 'idempotency.route': route },
        },
      },
    ],
    [
      'a stored answer, with its status and the time to store it',
      ['stored', { route, status: 201, durationMs: 2 }],
      {
        outcome: {
          attributes: {
            'idempotency.outcome': 'stored',
            'idempotency.route': route,
            'http.response.status_code': 201,
          },
        },
        duration: {
          ms: 2,
          attributes: { 'idempotency.step': 'store', 'idempotency.route': route },
        },
      },
    ],
    [
      'a replay from memory',
      ['replayed', { route, status: 201, fromMemory: true, durationMs: 0.1 }],
      {
        outcome: {
          attributes: {
            'idempotency.outcome': 'replayed',
            'idempotency.route': route,
            'http.response.status_code': 201,
            'idempotency.replay.source': 'memory',
          },
        },
        duration: {
          ms: 0.1,
          attributes: { 'idempotency.step': 'decide', 'idempotency.route': route },
        },
      },
    ],
    [
      'a replay from the database',
      ['replayed', { route, status: 200, fromMemory: false }],
      {
        outcome: {
          attributes: {
            'idempotency.outcome': 'replayed',
            'idempotency.route': route,
            'http.response.status_code': 200,
            'idempotency.replay.source': 'database',
          },
        },
      },
    ],
    [
      'a key given back, with its reason',
      ['released', { route, reason: 'store_unavailable' }],
      {
        outcome: {
          attributes: {
            'idempotency.outcome': 'released',
            'idempotency.route': route,
            'idempotency.reason': 'store_unavailable',
          },
        },
      },
    ],
    [
      'a takeover',
      ['takenOver', { route }],
      {
        outcome: {
          attributes: { 'idempotency.outcome': 'taken_over', 'idempotency.route': route },
        },
      },
    ],
    [
      'a lost lease',
      ['leaseLost', { route }],
      {
        outcome: {
          attributes: { 'idempotency.outcome': 'lease_lost', 'idempotency.route': route },
        },
      },
    ],
    [
      'a conflict without a route (never the tenant or key as attributes)',
      ['conflict', {}],
      {
        outcome: {
          attributes: { 'idempotency.outcome': 'conflict', 'idempotency.route': 'unknown' },
        },
      },
    ],
  ])('%s', (_name, args, expected) => {
    expect(metricPoints(...args)).toEqual(expected);
  });
});

describe('debugLine', () => {
  it.each<[Parameters<typeof debugLine>, string]>([
    [
      [
        'replayed',
        {
          route: 'C.m',
          tenant: '7',
          key: 'k1',
          status: 201,
          fromMemory: true,
          durationMs: 0.12345,
        },
      ],
      'idempotency:replayed route="C.m" tenant="7" key="k1" status=201 fromMemory=true durationMs=0.12',
    ],
    [
      [
        'released',
        { route: 'C.m', tenant: '7', key: 'k"2', reason: 'before_handler', status: undefined },
      ],
      'idempotency:released route="C.m" tenant="7" key="k\\"2" reason="before_handler"',
    ],
    [
      ['purged', { finished: 3, abandoned: 0, processedMessages: 1 }],
      'idempotency:purged finished=3 abandoned=0 processedMessages=1',
    ],
  ])('%j', (args, expected) => {
    expect(debugLine(...args)).toBe(expected);
  });
});
