/** The job's methods that move it while its run is active (see `stepJob`). */
export type StepMove = 'moveToDelayed' | 'moveToWait' | 'moveToWaitingChildren';

/**
 * Why a job's move is refused, or `undefined` where it is not (a pure decision): refused while
 * one of the job's atomic phases runs (`PhaseRunner.run()`, or `call()` up to its record's
 * commit: `phasesRunning` above 0). A move commits the job's step first, on the job's own
 * transaction, which holds nothing of the phase's: made inside the phase, the step and the move
 * would stand before the phase's own COMMIT, and a COMMIT then refused (a constraint checked at
 * COMMIT, the worker killed before it) would leave the job gone on without the phase's work
 * (adversary 90: an order shipped without its reservation). Refused, the phase rolls back and
 * the job fails with the refusal, on every run, not only where a COMMIT fails: moved after the
 * phase returns, its step commits after the phase's.
 */
export function moveInPhaseRefusal(move: StepMove, phasesRunning: number): string | undefined {
  if (phasesRunning <= 0) return undefined;
  return (
    `job.${move}() inside an atomic phase (phases.run(), phases.call()): the job's step would ` +
    `commit, and the job move on, before the phase's own COMMIT, which may yet fail. Move the ` +
    `job after the phase returns (the phase's work, then job.updateData() and job.${move}())`
  );
}
