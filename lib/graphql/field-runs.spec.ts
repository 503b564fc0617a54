import { laterRunStep } from './field-runs.js';

describe('laterRunStep', () => {
  const takeClaim = () => undefined;
  it.each([
    ['no earlier run', undefined, 'claim'],
    ['an earlier run not answered yet', { ended: false, delivering: false }, 'join'],
    [
      'an earlier run not answered yet, its error waiting',
      { ended: false, takeClaim, delivering: false },
      'join',
    ],
    [
      'an earlier run whose error waits, started as it was handed on (a retry)',
      { ended: true, takeClaim, delivering: true },
      'take-claim',
    ],
    [
      'an earlier run whose error waits, started after (an audit made late, a delayed retry)',
      { ended: true, takeClaim, delivering: false },
      'join',
    ],
    ['an earlier run that answered, stored', { ended: true, delivering: false }, 'claim'],
  ] as const)('%s: %s', (_name, earlier, step) => {
    expect(laterRunStep(earlier)).toBe(step);
  });
});
