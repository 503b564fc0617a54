import { JOB_TENANT_PREFIX, MAX_TENANT_ID_LENGTH } from '../decisions/tenant-id.js';
import { characterCount, unstorableTextProblem } from '../decisions/well-formed.js';
import { readMessageId } from '../messages/message-id.js';
import { type JobLike } from './job-like.js';

/** BullMQ's prefix when none is given: its queues' keys are `bull:<queue>:…`. */
const DEFAULT_BULLMQ_PREFIX = 'bull';

/**
 * Where a job's queue is, for its key's tenant, as the library read it (lib/jobs/job-store.ts
 * `jobStore`): a Redis database (a number, or `redis`), a schema of BullMQ's PostgreSQL
 * backend, or a place it cannot read (`unreadable`: only with a namespace of the app's).
 */
export type JobPlace =
  | number
  | { kind: 'redis'; db: number }
  | { kind: 'postgres'; schema: string }
  | { kind: 'unreadable' };

/**
 * The tenant's body (after `bullmq:`) by where the queue is (a pure decision); `queue` is the
 * queue's name under its prefix unless BullMQ's own (`<prefix>:<queue>`).
 */
function placeBody(queue: string, queueName: string, place: JobPlace, namespaced: boolean) {
  const where = typeof place === 'number' ? { kind: 'redis' as const, db: place } : place;
  switch (where.kind) {
    case 'redis':
      return where.db === 0 ? queue : `${queue}:db${where.db}:`;
    case 'postgres':
      return `${where.schema}:${queueName}:pg:`;
    case 'unreadable':
      if (namespaced) return queue;
      throw new TypeError('a queue whose place cannot be read has no tenant without a namespace');
  }
}

/**
 * The key scope of a job's record (a pure decision): its queue, as the record's tenant
 * (`bullmq:<queue>`); under a prefix of its own, the prefix too (`bullmq:<prefix>:<queue>`),
 * since BullMQ keeps one queue name under two prefixes as two queues (two services, or
 * tenants, on one Redis: adversary 67). A queue name cannot hold `:` (BullMQ refuses it), so
 * no two of them meet. By where the queue is (`place`):
 *  - a Redis database other than 0 (lib/jobs/job-store.ts `jobStore`): the database too,
 *    after the queue and ending in `:` (`bullmq:<queue>:db<n>:`,
 *    `bullmq:<prefix>:<queue>:db<n>:`): BullMQ keeps the queues of two databases apart, their
 *    jobs and ids too (adversary 90). No queue name is empty, so no tenant of a queue on
 *    database 0 ends in `:`, and theirs are as they were;
 *  - a schema of BullMQ's PostgreSQL backend: `bullmq:<schema>:<queue>:pg:` (the backend
 *    ignores the prefix; its schemas keep two queues of one name apart: adversary 92).
 * A namespace of the app's (no `:` in it) names the service, around what the library read,
 * which still tells its queues apart (adversary 94): `bullmq:<namespace>:<body>:ns:`, `<body>`
 * the tenant above after `bullmq:` (`bullmq:billing:emails:ns:` on database 0, or where the
 * library cannot read the place, `bullmq:billing:emails:db2::ns:`,
 * `bullmq:billing:svc_a:emails:pg::ns:`).
 * Each form ends its own way (no `:`, `:db<n>:`, `:pg:`, `:ns:`), the queue (no `:`) before
 * the ending, so no tenant of one form is one of another; a namespace (no `:`) is read up to
 * its first `:` and the ending `:ns:` taken off, so two namespaced tenants meet only where
 * their namespaces and bodies do.
 */
export function jobTenant(
  queueName: string,
  prefix: string = DEFAULT_BULLMQ_PREFIX,
  place: JobPlace = 0,
  namespace?: string,
): string {
  const queue = prefix === DEFAULT_BULLMQ_PREFIX ? queueName : `${prefix}:${queueName}`;
  const body = placeBody(queue, queueName, place, namespace !== undefined);
  return namespace === undefined
    ? `${JOB_TENANT_PREFIX}${body}`
    : `${JOB_TENANT_PREFIX}${namespace}:${body}:ns:`;
}

/**
 * Whether the keys table can hold `tenant` (a pure decision): its CHECK takes 1 to 255
 * characters, as PostgreSQL's `length()` counts them (code points: an emoji is one, not
 * JavaScript's two code units). A longer one (a long queue name, prefix, namespace or schema,
 * with `bullmq:` and the form's ending) is refused by every claim, for good.
 */
export function tenantFits(tenant: string): boolean {
  const characters = characterCount(tenant);
  return characters >= 1 && characters <= MAX_TENANT_ID_LENGTH;
}

/**
 * Why PostgreSQL's text cannot hold a job's tenant (a pure decision; completes "it ..."), or
 * undefined: a NUL (BullMQ takes one in a queue's name or prefix, Redis keeps it) fails every
 * claim with SQLSTATE 22021, and a lone surrogate has no UTF-8 form. Either is refused before
 * the claim, for good, as a tenant too long is (adversary 99).
 */
export function tenantProblem(tenant: string): string | undefined {
  return unstorableTextProblem(tenant);
}

/**
 * How long a queue's name may be where its tenant is `tenant` (a pure decision): the keys
 * table's 255 characters less what the tenant holds besides the name (`bullmq:`, the
 * namespace, the prefix, the place's ending), in characters as PostgreSQL counts them. 248 for a queue of BullMQ's own prefix on
 * database 0 of Redis, with no namespace; less under any of them.
 */
export function queueNameRoom(tenant: string, queueName: string): number {
  return MAX_TENANT_ID_LENGTH - (characterCount(tenant) - characterCount(queueName));
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
 * Every text of it the library sends is one PostgreSQL can hold: the key (`readMessageId`),
 * and under a key of the app's the job's id too, which names it as its steps' owner.
 */
export function jobKeyOf(job: JobLike, key?: (job: JobLike) => unknown): JobKeyReading {
  const counted = job.id === undefined ? undefined : jobIdentity(job);
  const value = key ? key(job) : (job.opts?.jobId ?? counted);
  const reading = readMessageId(value);
  if (reading.kind === 'id') {
    // Its id names the job as its steps' owner (`stepOwnerOf`), kept with its key's steps:
    // checked as the key is, where the key is not that id (adversary 99).
    const owner = key !== undefined ? stepOwnerOf(job, true) : undefined;
    const problem = owner === undefined ? undefined : unstorableTextProblem(owner);
    if (problem) return { kind: 'unusable', reason: `its id ${problem}` };
    return { kind: 'key', key: reading.id, derived: key !== undefined };
  }
  if (reading.kind === 'none') {
    return { kind: 'unusable', reason: key ? 'key(job) gave no key' : 'the job has no id' };
  }
  return { kind: 'unusable', reason: `its key ${reading.reason}` };
}
