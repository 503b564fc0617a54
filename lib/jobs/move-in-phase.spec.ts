import { moveInPhaseRefusal, type StepMove } from './move-in-phase.js';

describe('moveInPhaseRefusal', () => {
  it.each([
    ['moveToDelayed', 0, false],
    ['moveToWait', 0, false],
    ['moveToWaitingChildren', 0, false],
    ['moveToDelayed', 1, true],
    ['moveToWait', 1, true],
    ['moveToWaitingChildren', 1, true],
    ['moveToDelayed', 2, true],
  ] as const)('%s with %i phases running: refused %s', (move: StepMove, running, refused) => {
    const refusal = moveInPhaseRefusal(move, running);
    expect(refusal !== undefined).toBe(refused);
    if (refusal) expect(refusal).toContain(`job.${move}()`);
  });
});
