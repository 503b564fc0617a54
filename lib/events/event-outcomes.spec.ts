import { debugLine, keyKind, metricPoints } from './event-outcomes.js';

describe('metricPoints', () => {
  const route = 'Charges.create';
  it.each<[string, Parameters<typeof metricPoints>, ReturnType<typeof metricPoints>]>([
    [
      'a claim, with the time to decide',
      ['claimed', { route, durationMs: 1.5 }],
      {
        outcome: {
          attributes: {
            'idempotency.outcome': 'claimed',
            'idempotency.route': route,
            'idempotency.kind': 'request',
          },
        },
        duration: {
          ms: 1.5,
          attributes: {
            'idempotency.step': 'decide',
            'idempotency.route': route,
            'idempotency.kind': 'request',
          },
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
            'idempotency.kind': 'request',
            'http.response.status_code': 201,
          },
        },
        duration: {
          ms: 2,
          attributes: {
            'idempotency.step': 'store',
            'idempotency.route': route,
            'idempotency.kind': 'request',
          },
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
            'idempotency.kind': 'request',
            'http.response.status_code': 201,
            'idempotency.replay.source': 'memory',
          },
        },
        duration: {
          ms: 0.1,
          attributes: {
            'idempotency.step': 'decide',
            'idempotency.route': route,
            'idempotency.kind': 'request',
          },
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
            'idempotency.kind': 'request',
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
            'idempotency.kind': 'request',
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
          attributes: {
            'idempotency.outcome': 'taken_over',
            'idempotency.route': route,
            'idempotency.kind': 'request',
          },
        },
      },
    ],
    [
      'a lost lease',
      ['leaseLost', { route }],
      {
        outcome: {
          attributes: {
            'idempotency.outcome': 'lease_lost',
            'idempotency.route': route,
            'idempotency.kind': 'request',
          },
        },
      },
    ],
    [
      'a conflict without a route (never the tenant or key as attributes)',
      ['conflict', {}],
      {
        outcome: {
          attributes: {
            'idempotency.outcome': 'conflict',
            'idempotency.route': 'unknown',
            'idempotency.kind': 'request',
          },
        },
      },
    ],
    [
      "a job's replay: a job of a key that completed before, its kind from its tenant",
      [
        'replayed',
        {
          route: 'Payouts.process',
          tenant: 'bullmq:payouts',
          status: 200,
          fromMemory: false,
          durationMs: 3,
        },
      ],
      {
        outcome: {
          attributes: {
            'idempotency.outcome': 'replayed',
            'idempotency.route': 'Payouts.process',
            'idempotency.kind': 'job',
            'http.response.status_code': 200,
            'idempotency.replay.source': 'database',
          },
        },
        duration: {
          ms: 3,
          attributes: {
            'idempotency.step': 'decide',
            'idempotency.route': 'Payouts.process',
            'idempotency.kind': 'job',
          },
        },
      },
    ],
    [
      "a job's step, with its move",
      ['jobStep', { route: 'Payouts.process', tenant: 'bullmq:payouts', move: 'delayed' }],
      {
        outcome: {
          attributes: {
            'idempotency.outcome': 'job_step',
            'idempotency.route': 'Payouts.process',
            'idempotency.kind': 'job',
            'idempotency.job.move': 'delayed',
          },
        },
      },
    ],
    [
      'a tick another replica runs',
      ['tickSkipped', { route: 'Settle.tick', tenant: 'schedule:settle', reason: 'running' }],
      {
        outcome: {
          attributes: {
            'idempotency.outcome': 'tick_skipped',
            'idempotency.route': 'Settle.tick',
            'idempotency.kind': 'tick',
            'idempotency.reason': 'running',
          },
        },
      },
    ],
    [
      "a request of a tenant that only looks like the library's (no colon): a request",
      ['claimed', { route, tenant: 'bullmq' }],
      {
        outcome: {
          attributes: {
            'idempotency.outcome': 'claimed',
            'idempotency.route': route,
            'idempotency.kind': 'request',
          },
        },
      },
    ],
  ])('%s', (_name, args, expected) => {
    expect(metricPoints(...args)).toEqual(expected);
  });
});

describe('keyKind', () => {
  it.each<[string | undefined, ReturnType<typeof keyKind>]>([
    ['bullmq:payouts', 'job'],
    ['schedule:settle', 'tick'],
    ['acme', 'request'],
    ['bullmq', 'request'],
    ['', 'request'],
    [undefined, 'request'],
  ])('%j is a %s', (tenant, kind) => {
    expect(keyKind(tenant)).toBe(kind);
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
