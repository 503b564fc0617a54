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

/** The moves a job makes to end a step: it goes on in a later run (BullMQ's step idiom). */
const STEP_MOVES = new Set(['moveToDelayed', 'moveToWaitingChildren']);

/** The job a run hands its processor (see `steppedJob`), and what the run does with it. */
export interface SteppedJob<J> {
  job: J;
  /**
   * Writes the data the job gave `updateData()` while its work was uncommitted, once that
   * work committed (its step, or its result). Dropped if the work rolls back.
   */
  flush(): Promise<void>;
}

/**
 * The job as its run hands it to the processor: the same job, but
 *  - `updateData()` while the job's work is uncommitted (`pending`) is held: the job sees its
 *    new data at once, and BullMQ gets it once the work committed (`flush`). BullMQ keeps a
 *    job's data at once, where the job's work commits at its end: a step recorded in the data
 *    (BullMQ's step idiom) before its work committed would be skipped by the job's retry after
 *    an error that rolled the work back;
 *  - its moves that end a step (`moveToDelayed`, `moveToWaitingChildren`) first commit the
 *    step (`commitStep`: its work with its key unfinished) and write its held data: a step
 *    that cannot commit throws from the move, before the job moved, so that the job never goes
 *    on without it (its own error: BullMQ's attempts run the step again). Once per run.
 */
export function steppedJob<J extends object>(
  job: J,
  commitStep: () => Promise<void>,
  pending: () => boolean,
): SteppedJob<J> {
  let committed: Promise<void> | undefined;
  let held: { data: unknown } | undefined;
  const update = Reflect.get(job, 'updateData') as ((data: unknown) => Promise<void>) | undefined;
  const flush = async () => {
    if (!held || !update) return;
    const { data } = held;
    held = undefined;
    await update.call(job, data);
  };
  const stepped = new Proxy(job, {
    get(target, property, receiver) {
      const value: unknown = Reflect.get(target, property, receiver);
      if (typeof value !== 'function') return value;
      const method = value as (...args: unknown[]) => unknown;
      if (property === 'updateData') {
        return (data: unknown) => {
          if (!pending()) return method.call(target, data);
          // The job reads its new data at once, as BullMQ sets it.
          Reflect.set(target, 'data', data);
          held = { data };
          return Promise.resolve();
        };
      }
      if (typeof property !== 'string' || !STEP_MOVES.has(property)) return method.bind(target);
      return async (...args: unknown[]) => {
        committed ??= commitStep();
        await committed;
        await flush();
        return method.apply(target, args);
      };
    },
  });
  return { job: stepped, flush };
}
