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

describe('the model of a handler program', () => {
  it.each<[string, Op[], ReturnType<typeof expectedOutcome>]>([
    ['writes', [write, write], { kind: 'ok', writes: ['0', '1'], forgets: [], mayForget: [] }],
    [
      'a thrown failed statement',
      [write, { op: 'fail', then: 'throw' }],
      { kind: 'error', status: 500 },
    ],
    ['a swallowed failed statement', [write, swallow], { kind: 'aborted' }],
    ['a write after a swallowed failure', [swallow, write], { kind: 'error', status: 500 }],
    [
      'a nested transaction that commits',
      [write, tx([write, tx([write])])],
      { kind: 'ok', writes: ['0', '1.0', '1.1.0'], forgets: [], mayForget: [] },
    ],
    [
      'a nested transaction that throws, caught',
      [write, tx([write], 'throw', true), write],
      { kind: 'ok', writes: ['0', '2'], forgets: [], mayForget: [] },
    ],
    [
      'a nested failure swallowed inside its savepoint, caught',
      [tx([swallow], 'commit', true), write],
      { kind: 'ok', writes: ['1'], forgets: [], mayForget: [] },
    ],
    [
      'a nested failure thrown inside its savepoint, caught',
      [tx([write, { op: 'fail', then: 'throw' }], 'commit', true), write],
      { kind: 'ok', writes: ['1'], forgets: [], mayForget: [] },
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
      { kind: 'ok', writes: ['0'], forgets: ['1'], mayForget: [] },
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
  ])('%s', (_name, ops, outcome) => {
    expect(run(ops)).toEqual(outcome);
  });
});
