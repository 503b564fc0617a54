import { type JobLike } from './job-like.js';

/** A job as BullMQ has it in Redis now, as far as the library reads it. */
interface StoredJob {
  data: unknown;
  timestamp?: unknown;
  delay?: unknown;
  getState?: () => Promise<string>;
}

/**
 * Reads the job of `id` afresh from `job`'s queue, by `job`'s own class (BullMQ's
 * `Job.fromId`): resolves undefined where there is no such job; null where it cannot be read
 * so (not a BullMQ job: the library never imports the package, see `JobLike`).
 */
function readJob(job: JobLike, id: string): Promise<StoredJob | undefined> | null {
  const queue = (job as { queue?: unknown }).queue;
  const { fromId } = job.constructor as {
    fromId?: (queue: unknown, id: string) => Promise<StoredJob | undefined>;
  };
  if (typeof fromId !== 'function' || !queue) return null;
  return fromId.call(job.constructor, queue, id);
}

/**
 * The job's data as BullMQ has it now, read afresh from its queue (`Job.fromId`, on the
 * job's own queue and class); undefined where it cannot be read (not a BullMQ job, or the
 * job is gone). A worker's job object holds the data BullMQ had when it took the job.
 */
export async function freshDataOf(job: JobLike): Promise<{ data: unknown } | undefined> {
  const reading = job.id === undefined ? null : readJob(job, String(job.id));
  const fresh = reading ? await reading : undefined;
  return fresh ? { data: fresh.data } : undefined;
}

/** What the queue has of the job whose steps hold a key (see `stepOwnerOf`). */
export type StepOwnerSeen =
  /** Gone: removed, drained, cleaned, or replaced by BullMQ's deduplication between steps. */
  | { kind: 'gone' }
  /** In the delayed set until its next step, `delayMs` after it moved (BullMQ's `delay`). */
  | { kind: 'delayed'; delayMs: number }
  /** There, waiting for its children or to run again (no delay to tell). */
  | { kind: 'waiting' }
  /** There otherwise, or not to be told (not a BullMQ job, not such a name, Redis unread). */
  | { kind: 'there' };

/**
 * What the queue has of the job named `identity` (`jobIdentity`: its id and when it was
 * added), whose steps hold a key: no run of a job gone will end them; one delayed is not
 * worth asking after before its delay.
 */
export async function stepOwnerSeen(job: JobLike, identity: unknown): Promise<StepOwnerSeen> {
  if (typeof identity !== 'string') return { kind: 'there' };
  const at = identity.lastIndexOf('@');
  if (at <= 0) return { kind: 'there' };
  const id = identity.slice(0, at);
  const added = Number(identity.slice(at + 1));
  const reading = Number.isFinite(added) ? readJob(job, id) : null;
  if (!reading) return { kind: 'there' };
  try {
    const owner = await reading;
    if (owner === undefined || owner.timestamp !== added) return { kind: 'gone' };
    const state = await owner.getState?.();
    const delayMs = Number(owner.delay);
    if (state === 'delayed' && delayMs > 0) return { kind: 'delayed', delayMs };
    return state === 'active' ? { kind: 'there' } : { kind: 'waiting' };
  } catch {
    return { kind: 'there' };
  }
}

/**
 * How long a job waits for the job whose steps hold its key, in seconds (a pure decision; each
 * return is a start BullMQ counts: `maxStartedAttempts`), a minute at most:
 *  - one delayed until its next step: no sooner than that delay;
 *  - one there otherwise (waiting for its children or to run again, or active: BullMQ runs it
 *    but it has not taken its key back yet, or its worker died and BullMQ's stalled checker
 *    has not moved it yet), with no delay to tell: after 2, 4, 8… seconds by this job's own
 *    starts (adversaries 73 and 74);
 *  - none seen (a lost step, not asked): 1.
 */
export function waitSecondsFor(seen: StepOwnerSeen | undefined, starts: number): number {
  if (seen?.kind === 'delayed') return Math.min(60, Math.max(1, Math.ceil(seen.delayMs / 1000)));
  if (seen === undefined || seen.kind === 'gone') return 1;
  return Math.min(60, 2 ** Math.min(6, Math.max(1, starts)));
}
