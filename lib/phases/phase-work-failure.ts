/**
 * The failures of a phase's own work (its statements, its `record`, `finish()`'s work), as
 * `PhaseRunner` hands them on: a passing one in the library's words (`TransientDatabaseError`,
 * a 503 for a request), its cause the work's own error. A job counts it as its own (an
 * attempt), as it counts the same statement outside a phase (adversary 69: a phase's query
 * that always timed out was delayed for ever); only the phase's commit is the library's.
 */
const WORK_FAILURES = new WeakMap<object, unknown>();

/** Notes that `handedOn` is the failure `thrown` by a phase's work, in the library's words. */
export function notePhaseWorkFailure(handedOn: unknown, thrown: unknown): void {
  if (typeof handedOn === 'object' && handedOn !== null) WORK_FAILURES.set(handedOn, thrown);
}

/** What the phase's work threw, where `error` is its failure handed on; else undefined. */
export function phaseWorkFailure(error: unknown): { thrown: unknown } | undefined {
  if (typeof error !== 'object' || error === null || !WORK_FAILURES.has(error)) return undefined;
  return { thrown: WORK_FAILURES.get(error) };
}
