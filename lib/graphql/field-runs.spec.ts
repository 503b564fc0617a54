import { laterRunStep } from './field-runs.js';

describe('laterRunStep', () => {
  const takeClaim = () => undefined;
  it.each([
    ['no earlier run', undefined, 'claim'],
    ['an earlier run not answered yet', { ended: false, left: false, delivering: false }, 'join'],
    [
      'an earlier run not answered yet, its error waiting',
      { ended: false, left: false, takeClaim, delivering: false },
      'join',
    ],
    [
      'an earlier run whose error waits, started as it was handed on (a retry)',
      { ended: true, left: false, takeClaim, delivering: true },
      'take-claim',
    ],
    [
      'an earlier run whose error waits, started after (an audit made late, a delayed retry)',
      { ended: true, left: false, takeClaim, delivering: false },
      'join',
    ],
    [
      'an earlier run that answered (a passing failure), started as it was handed on (a retry)',
      { ended: true, left: false, delivering: true },
      'claim',
    ],
    [
      'an earlier run that answered, started after (an audit made late)',
      { ended: true, left: false, delivering: false },
      'join',
    ],
    [
      'an earlier run that left before any answer (answered from outside)',
      { ended: true, left: true, delivering: false },
      'claim',
    ],
  ] as const)('%s: %s', (_name, earlier, step) => {
    expect(laterRunStep(earlier)).toBe(step);
  });
});
