/**
 * What becomes of a job whose result is over `maxResponseBytes` (a pure decision), by what
 * its key holds of it as its run ends (`phaseResults`: its committed steps, its completed
 * `PhaseRunner` phases):
 *  - `refuse`: nothing of the job committed: the library's refusal is kept as its key's final
 *    answer, as a request's, and every comeback of the job replays it;
 *  - `give-back`: a step or a phase of it committed before (a reservation, a PSP's refund):
 *    its last run's work rolls back and its key is given back unfinished with them, as for a
 *    failure of the job's own, so that a retry after the fix goes on from them (adversary 88:
 *    the refusal kept as the final answer stranded them, every retry replaying it).
 */
export type TooLargeResult = 'refuse' | 'give-back';

export function tooLargeResult(phaseResults: Readonly<Record<string, unknown>>): TooLargeResult {
  return Object.keys(phaseResults).length > 0 ? 'give-back' : 'refuse';
}
