import { JOB_TENANT_PREFIX, MAX_TENANT_ID_LENGTH } from '../decisions/tenant-id.js';
import { readMessageId } from '../messages/message-id.js';
import { type JobLike } from './job-like.js';

/** BullMQ's prefix when none is given: its queues' keys are `bull:<queue>:…`. */
const DEFAULT_BULLMQ_PREFIX = 'bull';

/**
 * The key scope of a job's record: its queue, as the record's tenant (`bullmq:<queue>`); under
 * a prefix of its own, the prefix too (`bullmq:<prefix>:<queue>`), since BullMQ keeps one queue
 * name under two prefixes as two queues (two services, or tenants, on one Redis: adversary
 * 67). A queue name cannot hold `:` (BullMQ refuses it), so no two of them meet. On a Redis
 * database other than 0 (the worker's connection's, lib/jobs/redis-db.ts `jobRedisDb`), the database too, after the queue and ending
 * in `:` (`bullmq:<queue>:db<n>:`, `bullmq:<prefix>:<queue>:db<n>:`): BullMQ keeps the queues
 * of two databases apart, their jobs and ids too (adversary 90: one queue name on databases 1
 * and 2 of one server shared its jobs' keys). No queue name is empty, so no tenant of a queue
 * on database 0 ends in `:`, and theirs are as they were.
 */
export function jobTenant(
  queueName: string,
  prefix: string = DEFAULT_BULLMQ_PREFIX,
  db = 0,
): string {
  const queue =
    prefix === DEFAULT_BULLMQ_PREFIX
      ? `${JOB_TENANT_PREFIX}${queueName}`
      : `${JOB_TENANT_PREFIX}${prefix}:${queueName}`;
  return db === 0 ? queue : `${queue}:db${db}:`;
}

/**
 * Whether the keys table can hold `tenant` (a pure decision): its CHECK takes 1 to 255
 * characters. A longer one (a long queue name, or prefix) is refused by every claim, for good.
 */
export function tenantFits(tenant: string): boolean {
  return tenant.length >= 1 && tenant.length <= MAX_TENANT_ID_LENGTH;
}

/**
 * The job itself, as its steps name their key's owner: its id and the time it was added,
 * the same on each of its runs, another for another job of the key.
 */
export function jobIdentity(job: JobLike): string {
  return `${job.id}@${job.timestamp}`;
}

/**
 * The job as its steps name their key's owner (a pure decision): the app's own job id where
 * the key is that id (adding the job again under it, after the first was removed, is the same
 * job: it goes on with the key's steps), else the job itself (`jobIdentity`: another job of a
 * key of the app's, or of a counted id, waits for it).
 */
export function stepOwnerOf(job: JobLike, derived: boolean): string {
  const own = job.opts?.jobId;
  return !derived && own !== undefined ? `id:${own}` : jobIdentity(job);
}

/** What a job's key is: one to record it by, or why there is none. */
export type JobKeyReading =
  { kind: 'key'; key: string; derived: boolean } | { kind: 'unusable'; reason: string };

/**
 * The key a job's record is kept by (a pure decision):
 *  - the app's `key(job)` where given (`derived`): the same intent added as two jobs is one;
 *  - else the app's own job id (`opts.jobId`): adding it again, after the first was removed,
 *    is the same job;
 *  - else the id BullMQ counted, with the time the job was added: BullMQ counts ids per queue
 *    in Redis, and a Redis that lost its data (a failover, a restart without persistence)
 *    counts from 1 again; a new job 7 is then not the old job 7.
 * A stalled job, or one retried after an error, keeps its id and its time: the same key.
 */
export function jobKeyOf(job: JobLike, key?: (job: JobLike) => unknown): JobKeyReading {
  const counted = job.id === undefined ? undefined : jobIdentity(job);
  const value = key ? key(job) : (job.opts?.jobId ?? counted);
  const reading = readMessageId(value);
  if (reading.kind === 'id') return { kind: 'key', key: reading.id, derived: key !== undefined };
  if (reading.kind === 'none') {
    return { kind: 'unusable', reason: key ? 'key(job) gave no key' : 'the job has no id' };
  }
  return { kind: 'unusable', reason: `its key ${reading.reason}` };
}
