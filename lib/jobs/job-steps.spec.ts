import { STEP_LOST, STEP_OWNER, stepHold } from './job-steps.js';

describe('stepHold', () => {
  it.each([
    ['no step before it', {}, undefined],
    ['the app’s own phases only', { psp_paid: { id: 'tr_1' } }, undefined],
    ['its own job’s step', { [STEP_OWNER]: '7@100' }, undefined],
    ['another job’s step: it waits for that job', { [STEP_OWNER]: '8@200' }, { kind: 'held' }],
    [
      'a step that did not commit: fails for good, saying why',
      { [STEP_OWNER]: '7@100', [STEP_LOST]: 'deferred foreign key' },
      { kind: 'lost', why: 'deferred foreign key' },
    ],
  ] as const)('%s', (_name, results, hold) => {
    expect(stepHold(results, '7@100')).toEqual(hold);
  });
});
