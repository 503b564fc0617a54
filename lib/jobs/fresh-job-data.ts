import { type JobLike } from './job-like.js';

/** BullMQ's `Job` class, as a job object carries it: its `fromId` reads a job from Redis. */
interface JobClass {
  fromId?: (queue: unknown, id: string) => Promise<{ data: unknown } | undefined>;
}

/**
 * The job's data as BullMQ has it now, read afresh from its queue (`Job.fromId`, on the
 * job's own queue and class); undefined where it cannot be read (not a BullMQ job, or the
 * job is gone). A worker's job object holds the data BullMQ had when it took the job.
 */
export async function freshDataOf(job: JobLike): Promise<{ data: unknown } | undefined> {
  const queue = (job as { queue?: unknown }).queue;
  const { fromId } = job.constructor as JobClass;
  if (typeof fromId !== 'function' || !queue || job.id === undefined) return undefined;
  const fresh = await fromId.call(job.constructor, queue, String(job.id));
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
  const queue = (job as { queue?: unknown }).queue;
  const { fromId } = job.constructor as JobClass;
  if (typeof fromId !== 'function' || !queue || !Number.isFinite(added)) return { kind: 'there' };
  try {
    const owner = (await fromId.call(job.constructor, queue, id)) as
      { timestamp?: unknown; delay?: unknown; getState?: () => Promise<string> } | undefined;
    if (owner === undefined || owner.timestamp !== added) return { kind: 'gone' };
    const state = await owner.getState?.();
    const delayMs = Number(owner.delay);
    if (state === 'delayed' && delayMs > 0) return { kind: 'delayed', delayMs };
    return state === 'active' ? { kind: 'there' } : { kind: 'waiting' };
  } catch {
    return { kind: 'there' };
  }
}
