import { STEP_DATA, STEP_OWNER } from './job-steps.js';
import { tooLargeResult } from './too-large-result.js';

describe('tooLargeResult', () => {
  it.each([
    ['nothing committed before: the refusal is its final answer', {}, 'refuse'],
    [
      'a step committed (its owner and data kept): given back, a retry goes on from it',
      { [STEP_OWNER]: 'job:1', [STEP_DATA]: { data: { step: 'ship' } } },
      'give-back',
    ],
    [
      'a phase completed (a call out made): given back, a retry goes on after it',
      { psp_refunded: { pspRefundId: 're_1' } },
      'give-back',
    ],
  ] as const)('%s', (_name, phaseResults, decision) => {
    expect(tooLargeResult(phaseResults)).toBe(decision);
  });
});
