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
