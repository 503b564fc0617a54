import { type Op, expectedOutcome } from './handler-program.js';

const run = (ops: Op[]) => expectedOutcome({ id: 'p', ops });
const write: Op = { op: 'write' };
const swallow: Op = { op: 'fail', then: 'swallow' };
const tx = (body: Op[], end: 'commit' | 'throw' = 'commit', caught = false): Op => ({
  op: 'tx',
  body,
  end,
  caught,
});

const phase = (body: Op[], end: 'commit' | 'throw' = 'commit', caught = false): Op => ({
  op: 'phase',
  body,
  end,
  caught,
});

describe('the model of a handler program', () => {
  it.each<[string, Op[], object]>([
    [
      'a phase, then a write',
      [phase([write]), write],
      { kind: 'ok', writes: ['0.0', '1'], durable: ['0.0'] },
    ],
    [
      'a phase that commits, then an error: the phase stays',
      [phase([write, write]), { op: 'http', status: 409 }],
      { kind: 'error', status: 409, durable: ['0.0', '0.1'] },
    ],
    [
      'a phase that gives up, caught: nothing of it',
      [phase([write], 'throw', true), write],
      { kind: 'ok', writes: ['1'] },
    ],
    [
      'a phase whose statement fails, caught: the next phase commits',
      [phase([write, { op: 'fail', then: 'throw' }], 'commit', true), phase([write])],
      { kind: 'ok', writes: ['1.0'], durable: ['1.0'] },
    ],
    [
      'a phase that gives up, not caught: the error, nothing applied',
      [phase([write], 'throw'), write],
      { kind: 'error', status: 500 },
    ],
    [
      'a phase, then a swallowed failure: aborted, the phase stays',
      [phase([write]), swallow],
      { kind: 'aborted', durable: ['0.0'] },
    ],
  ])('%s', (_name, ops, outcome) => {
    expect(run(ops)).toEqual(expect.objectContaining(outcome));
    if (!('durable' in outcome)) expect(run(ops)).not.toHaveProperty('durable');
  });

  it('answers a BigInt in a GraphQL answer as its scalar writes it (no longer refused)', () => {
    expect(expectedOutcome({ id: 'p', ops: [write], shape: 'bigint' })).toMatchObject({
      kind: 'ok',
      writes: ['0'],
    });
  });

  it.each<[string, Op[], boolean]>([
    [
      'a nested transaction that gives up after work left running',
      [{ op: 'forget' }, tx([write], 'throw', true), write],
      true,
    ],
    ['one that commits after it', [{ op: 'forget' }, tx([write]), write], false],
    ['one that gives up before it', [tx([write], 'throw', true), { op: 'forget' }, write], false],
  ])('may refuse %s (its write may land in the savepoint): %s', (_name, ops, refusable) => {
    expect(run(ops)).toMatchObject({ kind: 'ok', refusable });
  });

  it('a session lock after a swallowed failure is refusable: refused from its text before it is sent', () => {
    // Fuzzer seed 932409 program 90 (pg): `… fail:swallow tx(lock:session)?`.
    const ops: Op[] = [swallow, tx([{ op: 'lock', scope: 'session' }], 'commit', true)];
    expect(expectedOutcome({ id: 'p', ops }, { lazySavepoints: true })).toEqual({
      kind: 'aborted',
      refusable: true,
    });
  });

  it('refuses any level asked for first on a consumer, whose transaction began with its record', () => {
    const first: Op[] = [{ ...tx([write]), isolation: 'SERIALIZABLE' } as Op, write];
    expect(expectedOutcome({ id: 'p', ops: first }, { begun: true })).toEqual({
      kind: 'error',
      status: 500,
    });
    // The same program on a route begins its transaction at the level.
    expect(expectedOutcome({ id: 'p', ops: first })).toMatchObject({ kind: 'ok' });
  });

  it('an empty nested transaction begins nothing on the pool seam, as without the library; TypeORM sends its SAVEPOINT', () => {
    // Fuzzer seed 916 program 8 (drizzle, kysely): `tx()!? tx[S]()?`.
    const ops: Op[] = [tx([], 'throw', true), { ...tx([write]), isolation: 'SERIALIZABLE' } as Op];
    expect(expectedOutcome({ id: 'p', ops }, { lazySavepoints: true })).toMatchObject({
      kind: 'ok',
      writes: ['1.0'],
    });
    expect(expectedOutcome({ id: 'p', ops })).toEqual({ kind: 'error', status: 500 });
  });

  it('an empty nested transaction after a swallowed failure is refused with TypeORM only: the pool seam sends no SAVEPOINT', () => {
    // Fuzzer seed 4502 program 0 (drizzle, kysely, prisma over GraphQL): `fail:swallow tx()`.
    const ops: Op[] = [swallow, tx([])];
    expect(expectedOutcome({ id: 'p', ops }, { lazySavepoints: true })).toEqual({
      kind: 'aborted',
    });
    expect(expectedOutcome({ id: 'p', ops })).toEqual({ kind: 'error', status: 500 });
    // A body that sends a statement is refused at it on both: its SAVEPOINT's error.
    expect(
      expectedOutcome({ id: 'p', ops: [swallow, tx([write])] }, { lazySavepoints: true }),
    ).toEqual({ kind: 'error', status: 500 });
    // What runs before that statement still runs: the handler's own HTTP error is its answer.
    const http: Op[] = [swallow, tx([{ op: 'http', status: 404 }, write], 'commit', true)];
    expect(expectedOutcome({ id: 'p', ops: http }, { lazySavepoints: true })).toEqual({
      kind: 'error',
      status: 404,
    });
    expect(expectedOutcome({ id: 'p', ops: http })).toEqual({ kind: 'aborted' });
  });

  it.each(['acme\ud800', 'acme\udbff'])(
    'refuses a tenant id with a lone surrogate (%j): 400 tenant_invalid, nothing applied',
    (tenant) => {
      expect(expectedOutcome({ id: 'p', ops: [write], tenant })).toEqual({
        kind: 'refused',
        status: 400,
        code: 'tenant_invalid',
      });
    },
  );

  it.each<[string, Op[], ReturnType<typeof expectedOutcome>]>([
    [
      'writes',
      [write, write],
      {
        kind: 'ok',
        writes: ['0', '1'],
        forgets: [],
        mayForget: [],
        stream: false,
        refusable: false,
      },
    ],
    [
      'a thrown failed statement',
      [write, { op: 'fail', then: 'throw' }],
      { kind: 'error', status: 500 },
    ],
    ['a swallowed failed statement', [write, swallow], { kind: 'aborted' }],
    [
      // The cursor's write per row may be refused first (500 cursor_open, nothing applied).
      'a swallowed failed statement after a cursor',
      [{ op: 'cursor' }, swallow],
      { kind: 'aborted', refusable: true },
    ],
    ['a write after a swallowed failure', [swallow, write], { kind: 'error', status: 500 }],
    [
      'a nested transaction that commits',
      [write, tx([write, tx([write])])],
      {
        kind: 'ok',
        writes: ['0', '1.0', '1.1.0'],
        forgets: [],
        mayForget: [],
        stream: false,
        refusable: false,
      },
    ],
    [
      'a nested transaction that throws, caught',
      [write, tx([write], 'throw', true), write],
      {
        kind: 'ok',
        writes: ['0', '2'],
        forgets: [],
        mayForget: [],
        stream: false,
        refusable: false,
      },
    ],
    [
      'a nested failure swallowed inside its savepoint, caught',
      [tx([swallow], 'commit', true), write],
      { kind: 'ok', writes: ['1'], forgets: [], mayForget: [], stream: false, refusable: false },
    ],
    [
      'a nested failure thrown inside its savepoint, caught',
      [tx([write, { op: 'fail', then: 'throw' }], 'commit', true), write],
      { kind: 'ok', writes: ['1'], forgets: [], mayForget: [], stream: false, refusable: false },
    ],
    [
      // "Exactly once at every seam", 1: the savepoint is refused, the request stays aborted.
      'a caught nested transaction after a swallowed failure',
      [swallow, tx([write], 'commit', true), { op: 'forget' }],
      { kind: 'aborted' },
    ],
    [
      'a nested transaction after a swallowed failure',
      [swallow, tx([write])],
      { kind: 'error', status: 500 },
    ],
    [
      'the handler’s own HTTP error',
      [write, { op: 'http', status: 404 }],
      { kind: 'error', status: 404 },
    ],
    [
      'work left running',
      [write, { op: 'forget' }, { op: 'sleep', ms: 5 }],
      { kind: 'ok', writes: ['0'], forgets: ['1'], mayForget: [], stream: false, refusable: false },
    ],
    [
      'an HTTP error inside a caught transaction goes through',
      [write, tx([write, { op: 'http', status: 409 }], 'commit', true), write],
      { kind: 'error', status: 409 },
    ],
    [
      'an uncaught nested transaction that throws',
      [write, tx([write], 'throw')],
      { kind: 'error', status: 500 },
    ],
    [
      'a database wait after a swallowed failure',
      [swallow, { op: 'dbsleep', ms: 1 }],
      { kind: 'error', status: 500 },
    ],
    [
      'an isolation level asked for first begins the transaction at it',
      [{ ...tx([write]), isolation: 'SERIALIZABLE' } as Op, tx([write], 'commit', false)],
      {
        kind: 'ok',
        writes: ['0.0', '1.0'],
        forgets: [],
        mayForget: [],
        stream: false,
        refusable: false,
      },
    ],
    [
      'a stronger level asked for after a write is refused, caught or not',
      [write, { ...tx([write], 'commit', true), isolation: 'REPEATABLE READ' } as Op],
      { kind: 'error', status: 500 },
    ],
    [
      'a level no stronger than the one begun is a savepoint',
      [
        { ...tx([]), isolation: 'SERIALIZABLE' } as Op,
        write,
        { ...tx([write]), isolation: 'REPEATABLE READ' } as Op,
      ],
      {
        kind: 'ok',
        writes: ['1', '2.0'],
        forgets: [],
        mayForget: [],
        stream: false,
        refusable: false,
      },
    ],
    [
      'a stream that fails once is streamed whole by the retry',
      [write, { op: 'stream', fail: true }],
      { kind: 'ok', writes: ['0'], forgets: [], mayForget: [], stream: true, refusable: false },
    ],
    [
      'a stream after a swallowed failure',
      [write, swallow, { op: 'stream', fail: false }],
      { kind: 'aborted' },
    ],
    [
      'a read of the request’s own transaction, after a write',
      [write, { op: 'read' }],
      { kind: 'ok', writes: ['0'], forgets: [], mayForget: [], stream: false, refusable: false },
    ],
    ['a read after a swallowed failure', [swallow, { op: 'read' }], { kind: 'error', status: 500 }],
    [
      'a booking under a session lock may be refused',
      [write, { op: 'lock', scope: 'session' }],
      { kind: 'ok', writes: ['0'], forgets: [], mayForget: [], stream: false, refusable: true },
    ],
    [
      'an HTTP error after a session lock: the lock’s refusal may stand for it',
      [
        { op: 'lock', scope: 'session' },
        { op: 'http', status: 422 },
      ],
      { kind: 'error', status: 422, refusable: true },
    ],
    [
      'an HTTP error before it: the handler’s own, nothing to refuse',
      [
        { op: 'http', status: 422 },
        { op: 'lock', scope: 'session' },
      ],
      { kind: 'error', status: 422 },
    ],
    [
      'a booking under a transaction lock may not',
      [{ op: 'lock', scope: 'xact' }, write],
      { kind: 'ok', writes: ['1'], forgets: [], mayForget: [], stream: false, refusable: false },
    ],
    [
      'a cursor writes a row per row read, and may be refused',
      [{ op: 'cursor' }],
      {
        kind: 'ok',
        writes: ['0.0', '0.1'],
        forgets: [],
        mayForget: [],
        stream: false,
        refusable: true,
      },
    ],
    [
      'an array transaction writes each of its writes',
      [{ op: 'batch', n: 2 }],
      {
        kind: 'ok',
        writes: ['0.0', '0.1'],
        forgets: [],
        mayForget: [],
        stream: false,
        refusable: false,
      },
    ],
    [
      'SET LOCAL ROLE in a nested transaction ends with it',
      [tx([{ op: 'setlocal', what: 'role' }, write]), write],
      {
        kind: 'ok',
        writes: ['0.1', '1'],
        forgets: [],
        mayForget: [],
        stream: false,
        refusable: false,
      },
    ],
    [
      'work outside the request is no effect of it, even after a swallowed failure',
      [write, swallow, { op: 'outside' }],
      { kind: 'aborted' },
    ],
  ])('%s', (_name, ops, outcome) => {
    expect(run(ops)).toEqual(outcome);
  });
});
