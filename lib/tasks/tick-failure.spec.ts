import { resumesAfterFailure, tickFailed } from './tick-failure.js';

describe('resumesAfterFailure', () => {
  it.each([
    ['no phase committed: its failure kept, not run again', '0', {}, false],
    ['no phase, taken over after a crash: its failure kept', '1', {}, false],
    ['a phase committed: resumed by a later tick', '0', { psp_paid: { id: 'tr_1' } }, true],
    ['a phase, taken over twice: resumed once more', '2', { psp_paid: {} }, true],
    ['a phase, taken over three times: its failure kept', '3', { psp_paid: {} }, false],
  ] as const)('%s', (_name, lockVersion, phaseResults, resumes) => {
    expect(resumesAfterFailure({ lockVersion, phaseResults })).toBe(resumes);
  });
});

describe('tickFailed', () => {
  it('keeps the error’s words', () => {
    const answer = tickFailed(new Error('the ledger is closed'));
    expect(answer.status).toBe(500);
    expect(answer.body.toString()).toBe(
      'the tick failed, and is not run again: the ledger is closed',
    );
  });
});
