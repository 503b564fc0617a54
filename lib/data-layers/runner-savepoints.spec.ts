import { type SavepointControl } from '../transaction/sql/sql-text.js';
import { REQUEST_CODE, RunnerSavepoints, type SavepointRefusal } from './runner-savepoints.js';

const booking = { runner: 'booking' };
const audit = { runner: 'audit' };
const set = (name: string): SavepointControl => ({ kind: 'savepoint', name });
const release = (name: string): SavepointControl => ({ kind: 'release', name });
const back = (name: string): SavepointControl => ({ kind: 'rollback-to', name });

type Step = ['ran', object, SavepointControl, number] | ['work', object] | ['ended', number];

describe('RunnerSavepoints: a hand-written savepoint statement reaching another runner’s (adversary 85)', () => {
  it.each<
    [
      string,
      Step[],
      object,
      SavepointControl,
      { innermostOthers?: boolean; deeper?: number },
      SavepointRefusal | undefined,
    ]
  >([
    ['its own set, alone', [], booking, set('step'), {}, undefined],
    [
      'set while another’s transaction, begun after its own, is open',
      [],
      booking,
      set('step'),
      { innermostOthers: true },
      'set-inside-other',
    ],
    [
      'its own rolled back to, nothing of another’s inside',
      [
        ['ran', booking, set('step'), 2],
        ['work', booking],
      ],
      booking,
      back('step'),
      {},
      undefined,
    ],
    [
      'rolled back to after another wrote inside it',
      [
        ['ran', booking, set('step'), 2],
        ['work', audit],
      ],
      booking,
      back('step'),
      {},
      'takes-other',
    ],
    [
      'rolled back to while another’s transaction begun inside it is open',
      [['ran', booking, set('step'), 2]],
      booking,
      back('step'),
      { deeper: 2 },
      'takes-other',
    ],
    [
      'released after another committed inside it: its work kept either way',
      [
        ['ran', booking, set('step'), 2],
        ['work', audit],
        ['ended', 2],
      ],
      booking,
      release('step'),
      {},
      undefined,
    ],
    [
      'released while another’s transaction begun inside it is open',
      [['ran', booking, set('step'), 2]],
      booking,
      release('step'),
      { deeper: 2 },
      'ends-other',
    ],
    [
      'a name whose latest is another’s',
      [
        ['ran', booking, set('sp'), 2],
        ['ran', audit, set('sp'), 3],
      ],
      booking,
      back('sp'),
      {},
      'reaches-other',
    ],
    [
      'the other’s ended with its transaction: its own reached',
      [
        ['ran', booking, set('sp'), 2],
        ['ran', audit, set('sp'), 3],
        ['ended', 2],
      ],
      booking,
      release('sp'),
      {},
      undefined,
    ],
    [
      'rolled back to once, then again: what was inside undone',
      [
        ['ran', booking, set('step'), 2],
        ['ran', booking, back('step'), 2],
      ],
      booking,
      back('step'),
      {},
      undefined,
    ],
    ['a name never set here: PostgreSQL’s to answer', [], booking, back('x'), {}, undefined],
    [
      // dataSource.query('SAVEPOINT mine') … dataSource.query('ROLLBACK TO SAVEPOINT mine'):
      // each a runner of its own, all the request's own code.
      'the request’s own code, through several runners',
      [
        ['ran', REQUEST_CODE, set('mine'), 1],
        ['work', REQUEST_CODE],
      ],
      REQUEST_CODE,
      back('mine'),
      {},
      undefined,
    ],
    [
      // Its work is the request's, all of it: nothing of another's apart from it.
      'the request’s own savepoint after a runner’s transaction committed inside it',
      [
        ['ran', REQUEST_CODE, set('mine'), 1],
        ['work', audit],
        ['ended', 1],
      ],
      REQUEST_CODE,
      back('mine'),
      {},
      undefined,
    ],
    [
      // dataSource.query('INSERT …') beside a runner's transaction commits on its own
      // without the library.
      'a runner’s savepoint after the request’s own code wrote inside it',
      [
        ['ran', booking, set('step'), 2],
        ['work', REQUEST_CODE],
      ],
      booking,
      back('step'),
      {},
      'takes-other',
    ],
  ])('%s', (_name, steps, owner, control, around, expected) => {
    const savepoints = new RunnerSavepoints();
    for (const step of steps) {
      if (step[0] === 'ran') savepoints.ran(step[1], step[2], step[3]);
      else if (step[0] === 'work') savepoints.workOf(step[1]);
      else savepoints.nestedEnded(step[1]);
    }
    const refusal = savepoints.refusalOf(owner, control, {
      innermostOthers: around.innermostOthers ?? false,
      othersDeeperThan: (depth) => around.deeper !== undefined && around.deeper >= depth,
    });
    expect(refusal).toBe(expected);
  });
});
