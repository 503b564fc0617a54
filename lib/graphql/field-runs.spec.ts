import { inheritsClaim, laterRunStep } from './field-runs.js';

describe('laterRunStep', () => {
  const takeClaim = () => undefined;
  it.each([
    ['no earlier run', undefined, 'claim'],
    ['an earlier run not answered yet', { ended: false, left: false, errorHeld: false }, 'join'],
    [
      'an earlier run not answered yet, its error waiting',
      { ended: false, left: false, takeClaim, errorHeld: false },
      'join',
    ],
    [
      "an earlier run whose error waits, taken by the app's chain (its retry, at once or delayed)",
      { ended: true, left: false, takeClaim, errorHeld: true },
      'take-claim',
    ],
    [
      'an earlier run whose error waits, gone on to GraphQL (an audit made late)',
      { ended: true, left: false, takeClaim, errorHeld: false },
      'join',
    ],
    [
      "an earlier run that answered (a passing failure), its error taken by the app's retry",
      { ended: true, left: false, errorHeld: true },
      'claim',
    ],
    [
      'an earlier run that answered, its answer gone on to GraphQL (an audit made late)',
      { ended: true, left: false, errorHeld: false },
      'join',
    ],
    [
      'an earlier run that left before any answer (answered from outside)',
      { ended: true, left: true, errorHeld: false },
      'claim',
    ],
  ] as const)('%s: %s', (_name, earlier, step) => {
    expect(laterRunStep(earlier)).toBe(step);
  });
});

describe('inheritsClaim', () => {
  it.each([
    ['joined as GraphQL subscribed, beside an audit that subscribed first', false, true, true],
    ['joined while the resolver works, on a timer or after I/O (an audit)', false, false, false],
    ['joined after the earlier run answered, in its turn', true, true, false],
    ['joined after the earlier run answered (an audit made late)', true, false, false],
  ] as const)('%s', (_name, ended, inStartingTurn, inherits) => {
    expect(inheritsClaim({ ended, inStartingTurn })).toBe(inherits);
  });
});
