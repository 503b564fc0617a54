import { laterRunStep } from './field-runs.js';

describe('laterRunStep', () => {
  const takeClaim = () => undefined;
  it.each([
    ['no earlier run', undefined, 'claim'],
    ['an earlier run not answered yet', { ended: false }, 'join'],
    ['an earlier run not answered yet, its error waiting', { ended: false, takeClaim }, 'join'],
    ['an earlier run whose error waits to be stored', { ended: true, takeClaim }, 'take-claim'],
    ['an earlier run that answered, stored', { ended: true }, 'claim'],
  ] as const)('%s: %s', (_name, earlier, step) => {
    expect(laterRunStep(earlier)).toBe(step);
  });
});
