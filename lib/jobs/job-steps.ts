import { type StepMove } from './move-in-phase.js';

/**
 * What a job's steps leave on its key, as phase results of the library's own, under names of
 * the `bullmq:` form (jobs.md: a job's own phases must not take them).
 */

/** The job whose steps hold the key (its `stepOwnerOf`), between two of its runs. */
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

/**
 * The job's data as its last committed step left it (`{ data }`), kept with the step: BullMQ
 * gets it only after the step committed, and a worker that died in between leaves BullMQ the
 * data of the step before, which the job's next run would do again.
 */
export const STEP_DATA = 'bullmq:step-data';

/**
 * The data a job's run gives back to BullMQ before it runs (a pure decision), from its own
 * last committed step (`owner` is the key's, `added` the time this job was added):
 *  - the same job's run: only where BullMQ never had that step's data (its worker died after
 *    the step committed, before the write was noted: `written`) and still has the data of
 *    before the step; never over data written since (the job's own after its move, an
 *    operator's fix or rewind: adversaries 61, 64);
 *  - the job added again under its own id (another `added`): the step's data, so that it goes
 *    on from the step its key reached and does none of them again (adversary 64).
 * `current`: the JSON of the data BullMQ has now.
 */
export function dataToRestore(
  results: Readonly<Record<string, unknown>>,
  owner: string,
  added: number,
  current: string,
): { data: unknown } | undefined {
  if (results[STEP_OWNER] !== owner) return undefined;
  const kept = results[STEP_DATA] as
    { data?: unknown; over?: unknown; written?: unknown; added?: unknown } | undefined;
  if (!kept || typeof kept.data !== 'string' || typeof kept.over !== 'string') return undefined;
  const data = fromBase64(kept.data);
  if (data === current) return undefined;
  const sameJob = kept.added === undefined || kept.added === added;
  if (sameJob && (kept.written === true || fromBase64(kept.over) !== current)) return undefined;
  return { data: JSON.parse(data) as unknown };
}

/**
 * Whether the job's data, as this run was given it, may be older than BullMQ's (a pure
 * decision): its last step's data was written to BullMQ (`written`), and the run holds the
 * data of before that step. A job moved back to wait before its step's data reached BullMQ
 * (`moveToWaitingChildren` moves first; a child that ends at once moves it back) is taken by
 * a worker with the data of before; once that data was written, nothing restores it
 * (adversary 72). The run then reads the job's data afresh from BullMQ (see `IdempotentJobs`).
 */
export function mayBeStale(
  results: Readonly<Record<string, unknown>>,
  owner: string,
  added: number,
  current: string,
): boolean {
  if (results[STEP_OWNER] !== owner) return false;
  const kept = results[STEP_DATA] as
    { data?: unknown; over?: unknown; written?: unknown; added?: unknown } | undefined;
  if (!kept || typeof kept.data !== 'string' || typeof kept.over !== 'string') return false;
  const sameJob = kept.added === undefined || kept.added === added;
  return (
    sameJob &&
    kept.written === true &&
    fromBase64(kept.data) !== current &&
    fromBase64(kept.over) === current
  );
}

/**
 * What a step leaves on its key (see `keptStepData`): the data it held, or only the time the
 * job that stepped was added (`added`: another job added again under its id is told apart)
 * and that it saved nothing (`polled`). `RELEASE_JOB_STEP` adds the claim's version it
 * committed at (`version`), which fences the forget of its data (`FORGET_JOB_STEP_DATA`).
 */
export interface KeptStepData {
  data?: string;
  over?: string;
  added: number;
  polled?: true;
}

/**
 * The data a step leaves, as its key keeps it: its JSON (as BullMQ writes it) in base64, with
 * the JSON BullMQ had before it, so that a NUL or a lone surrogate in it (which jsonb refuses)
 * commits as BullMQ keeps it (adversary 61). A step that holds no new data (a poll) leaves
 * `added` and `polled`: the key then keeps what its step before left, where there was one
 * (`RELEASE_JOB_STEP`: a poll changes nothing, adversary 74), and is marked as polls only
 * where there was none, so that a job taking it over goes on from its own data (adversary 75).
 */
export function keptStepData(held: HeldData, added: number): KeptStepData {
  if (!held) return { added, polled: true };
  return { data: toBase64(jsonOf(held.data)), over: toBase64(held.over), added };
}

/**
 * What the key keeps of its owner's steps to go on from (a pure decision):
 *  - `data`: the data its last step with data left;
 *  - `polls`: nothing, and nothing is missing: its steps so far saved nothing (polls), so the
 *    job's own data is where they left it;
 *  - `none`: nothing, though its steps saved data: the job saved its next step after it moved
 *    (BullMQ's docs' order), and its key forgot the step data it kept (`FORGET_JOB_STEP_DATA`);
 *    or a poll of an earlier version, which left no `polled` mark and cannot be told from it
 *    (read as forgotten: refusing the job is the side that does no step twice).
 */
export type StepDataKept = 'data' | 'polls' | 'none';

export function stepDataKept(results: Readonly<Record<string, unknown>>): StepDataKept {
  const kept = results[STEP_DATA] as { data?: unknown; polled?: unknown } | undefined;
  if (typeof kept?.data === 'string') return 'data';
  return kept?.polled === true ? 'polls' : 'none';
}

/**
 * Whether a job that names the key's owner as its steps did (the app's own id) is another job
 * than the one whose steps hold the key, and the key forgot their last step's data (a pure
 * decision): removed between its steps and added again under its id, it would do its steps
 * again from its first (adversary 74). Told by the time each was added (`added`); a key whose
 * step left no such time (an older version's) cannot tell, and goes on as before. A key whose
 * steps were polls lost nothing: the job added again goes on from its own data (adversary 75).
 */
export function readdedWithoutStepData(
  results: Readonly<Record<string, unknown>>,
  owner: string,
  added: number,
): boolean {
  if (results[STEP_OWNER] !== owner || stepDataKept(results) !== 'none') return false;
  const kept = results[STEP_DATA] as { added?: unknown } | undefined;
  return typeof kept?.added === 'number' && kept.added !== added;
}

/** A job's data as BullMQ writes it (`JSON.stringify`; nothing as `null`). */
export function jsonOf(data: unknown): string {
  return JSON.stringify(data) ?? 'null';
}

const toBase64 = (text: string) => Buffer.from(text, 'utf8').toString('base64');
const fromBase64 = (text: string) => Buffer.from(text, 'base64').toString('utf8');

/**
 * What the job gave `updateData()` while its work was uncommitted, held (see `stepJob`), and
 * the JSON of the data BullMQ had then (`over`).
 */
export type HeldData = { data: unknown; over: string } | undefined;

/**
 * The last progress the job gave `updateProgress()` while its work was uncommitted, held, and
 * the JSON of the progress BullMQ had then (`over`, `null` for none).
 */
export type HeldProgress = { value: unknown; over: string } | undefined;

/** The job's methods a run takes the place of while it runs (see `stepJob`). */
const STEPPED = [
  'updateData',
  'updateProgress',
  'moveToDelayed',
  'moveToWait',
  'moveToWaitingChildren',
] as const;

/** A job whose run steps it (see `stepJob`), and what the run does with it. */
export interface SteppedJob {
  /**
   * Writes the data the job gave `updateData()` (and the progress it gave `updateProgress()`)
   * while its work was uncommitted, once that work committed (its step, or its result).
   * Dropped if the work rolls back.
   */
  flush(): Promise<void>;
  /** `flush`, after a step committed: and notes on its key that BullMQ has its data. */
  flushStep(): Promise<void>;
  /** The data held now (see `flush`). */
  held(): HeldData;
  /** The progress held now (see `flush`). */
  heldProgress(): HeldProgress;
  /**
   * Gives the job its own methods back, once its run ended; and, where data or progress is
   * still held (never written: its work rolled back, or the library's refusal was kept in place
   * of its result), the data and progress BullMQ has: the object BullMQ hands its `failed`
   * listeners (a dead-letter queue) says what stands, not a step whose work is gone
   * (adversary 75).
   */
  release(): void;
}

/**
 * Steps the job for its run, in place (the processor's argument, and the same object that a
 * request-scoped consumer gets as `JOB_REF`, or that it keeps):
 *  - `updateData()` while the job's work is uncommitted (`pending`) is held: the job sees its
 *    new data at once, and BullMQ gets it once the work committed (`flush`). BullMQ keeps a
 *    job's data at once, where the job's work commits at its end: a step recorded in the data
 *    (BullMQ's step idiom) before its work committed would be skipped by the job's retry after
 *    an error that rolled the work back;
 *  - `updateProgress()` the same (its last value, and BullMQ's `progress` event, once the work
 *    committed): a job that reads its progress back on its retry to skip what it did would
 *    skip a step whose work rolled back (adversary 74);
 *  - `updateData()` after a step committed and the job moved (BullMQ's docs' order: the move,
 *    then the data) first tells its key (`dataAfterStep`) that the data the key keeps is not
 *    the job's next step's: no job that takes the key over goes on from it;
 *  - `moveToDelayed()` (and `moveToWait()`) first commits the step (`commitStep`: its work with its key unfinished,
 *    its held data with it) and writes its held data: a step that cannot commit throws from
 *    the move, before the job moved, so that the job never goes on without it (its own error:
 *    BullMQ's attempts run the step again). Once per run;
 *  - a move of the three inside an atomic phase of the job is refused (`refuseMove`, see
 *    `moveInPhaseRefusal`): its step would commit before the phase's COMMIT;
 *  - `moveToWaitingChildren()` moves first: where no child is pending (false) the job has not
 *    moved and goes on, its work uncommitted; where it moved, its step commits then (a step
 *    that cannot commit is rolled back with its held data: BullMQ still has the data of the
 *    step before, which the job's next run does again). `afterMove` gets that commit.
 */
export function stepJob(
  job: object,
  commitStep: (held: HeldData) => Promise<void>,
  pending: () => boolean,
  afterMove: (step: Promise<void>) => void,
  stepWritten: (held: NonNullable<HeldData>) => Promise<void> = () => Promise.resolve(),
  dataAfterStep: () => Promise<void> = () => Promise.resolve(),
  refuseMove: (move: StepMove) => void = () => undefined,
): SteppedJob {
  let committed: Promise<void> | undefined;
  let held: HeldData;
  /** The progress given `updateProgress()` while the work was uncommitted, its last. */
  let heldProgress: { value: unknown } | undefined;
  /** Told once, at the first write of data after the step committed (see `dataAfterStep`). */
  let toldAfterStep: Promise<void> | undefined;
  const own = (name: string) => Reflect.get(job, name) as (...args: unknown[]) => Promise<unknown>;
  const updateData = own('updateData');
  const updateProgress = own('updateProgress');
  const moveToDelayed = own('moveToDelayed');
  const moveToWait = own('moveToWait');
  const moveToWaitingChildren = own('moveToWaitingChildren');
  const saved = STEPPED.map((name) => [name, Object.getOwnPropertyDescriptor(job, name)] as const);
  /**
   * The JSON of the data and progress BullMQ has, as far as this run wrote them (see
   * `release`): copies, not the objects, which the job may change in place before it holds
   * them again (`job.data.step = …; updateData(job.data)`: adversary 75b).
   */
  let written = jsonOf(Reflect.get(job, 'data'));
  let progressWritten = JSON.stringify(Reflect.get(job, 'progress'));
  const wroteData = (data: unknown) => {
    written = jsonOf(data);
  };
  const wroteProgress = (progress: unknown) => {
    progressWritten = JSON.stringify(progress);
  };
  const flushProgress = async () => {
    if (!heldProgress || !updateProgress) return;
    const { value } = heldProgress;
    heldProgress = undefined;
    await updateProgress.call(job, value);
    wroteProgress(value);
  };
  const flush = async () => {
    if (held && updateData) {
      const { data } = held;
      held = undefined;
      await updateData.call(job, data);
      wroteData(data);
    }
    await flushProgress();
  };
  const commit = () => {
    committed ??= commitStep(held);
    return committed;
  };
  /** Writes a committed step's held data, and notes on its key that BullMQ has it. */
  const flushStep = async () => {
    const stepHeld = held;
    await flush();
    if (stepHeld) await stepWritten(stepHeld);
  };
  const replace = (name: string, value: (...args: never[]) => Promise<unknown>) =>
    Object.defineProperty(job, name, { value, configurable: true, writable: true });
  if (updateData) {
    replace('updateData', async (data: unknown) => {
      if (!pending()) {
        // Its key told first: a worker that dies in between leaves no data to go on from,
        // never the data of the step before as the next step's.
        if (committed) {
          toldAfterStep ??= committed.then(dataAfterStep, () => undefined);
          await toldAfterStep;
        }
        await updateData.call(job, data);
        wroteData(data);
        return;
      }
      // What BullMQ could not write (a BigInt, a cycle) throws here, at the call, as BullMQ's
      // own `updateData` would: held, it would throw once the work committed.
      // Held as BullMQ would have written it now (its JSON): what the job changes in that
      // object after the call is not written, as without the library (adversary 73).
      const json = jsonOf(data);
      // The job reads its new data at once, as BullMQ sets it.
      Reflect.set(job, 'data', data);
      held = { data: JSON.parse(json) as unknown, over: written };
    });
  }
  if (updateProgress) {
    replace('updateProgress', async (progress: unknown) => {
      if (!pending()) {
        await updateProgress.call(job, progress);
        wroteProgress(progress);
        return;
      }
      // The job reads its progress at once, as BullMQ sets it; what BullMQ could not write
      // throws here, at the call.
      const json = JSON.stringify(progress);
      Reflect.set(job, 'progress', progress);
      heldProgress = { value: JSON.parse(json ?? 'null') as unknown };
    });
  }
  if (moveToDelayed) {
    replace('moveToDelayed', async (...args: unknown[]) => {
      refuseMove('moveToDelayed');
      await commit();
      await flushStep();
      return moveToDelayed.apply(job, args);
    });
  }
  // `moveToWait()` (then `WaitingError`): the same, first its step (adversary 72: moved first,
  // the job was taken again before its step committed, with the data of the step before).
  if (moveToWait) {
    replace('moveToWait', async (...args: unknown[]) => {
      refuseMove('moveToWait');
      await commit();
      await flushStep();
      return moveToWait.apply(job, args);
    });
  }
  if (moveToWaitingChildren) {
    replace('moveToWaitingChildren', async (...args: unknown[]) => {
      refuseMove('moveToWaitingChildren');
      const moved = await moveToWaitingChildren.apply(job, args);
      if (moved !== true || committed) return moved;
      const step = commit().then(flushStep);
      afterMove(step);
      await step.catch(() => undefined);
      return moved;
    });
  }
  return {
    flush,
    flushStep,
    held: () => held,
    heldProgress: () =>
      heldProgress && { value: heldProgress.value, over: progressWritten ?? 'null' },
    release: () => {
      for (const [name, descriptor] of saved) {
        if (descriptor) Object.defineProperty(job, name, descriptor);
        else Reflect.deleteProperty(job, name);
      }
      if (held) Reflect.set(job, 'data', JSON.parse(written));
      if (heldProgress) {
        Reflect.set(
          job,
          'progress',
          progressWritten === undefined ? undefined : JSON.parse(progressWritten),
        );
      }
      held = undefined;
      heldProgress = undefined;
    },
  };
}
