/**
 * What a job's steps leave on its key, as phase results of the library's own, under names of
 * the `bullmq:` form (jobs.md: a job's own phases must not take them).
 */

/** The job whose steps hold the key (its `jobIdentity`), between two of its runs. */
export const STEP_OWNER = 'bullmq:step';
/** Why a step of the job did not commit after the job had moved itself on. */
export const STEP_LOST = 'bullmq:step-lost';

/**
 * Whether a run that took a job's key over may go on (a pure decision): `undefined` when it
 * may (no step before it, or its own job's); `held` when the key is between another job's
 * steps (that job goes on; this one waits for its result); `lost` when a step did not commit.
 */
export function stepHold(
  results: Readonly<Record<string, unknown>>,
  identity: string,
): { kind: 'held' } | { kind: 'lost'; why: string } | undefined {
  const lost = results[STEP_LOST];
  if (typeof lost === 'string') return { kind: 'lost', why: lost };
  const owner = results[STEP_OWNER];
  if (typeof owner === 'string' && owner !== identity) return { kind: 'held' };
  return undefined;
}
