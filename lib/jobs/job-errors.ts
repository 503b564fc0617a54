import { MAX_TENANT_ID_LENGTH } from '../decisions/tenant-id.js';
import { characterCount, firstCharacters } from '../decisions/well-formed.js';
import { queueNameRoom } from './job-key.js';

/**
 * A job the library refuses for good: trying it again would meet the same (its key, its
 * result). BullMQ fails it at once (`UnrecoverableError`), with these words as its reason.
 */
export abstract class JobRefusedError extends Error {}

/** A job whose key cannot be kept: it could not be told from its comebacks. */
export class JobKeyUnusableError extends JobRefusedError {
  constructor(where: string, reason: string) {
    super(
      `the job cannot be recorded: ${reason}. Give the job an id of 1 to 255 characters ` +
        `without NUL, or a key: (job) => string of that form (${where})`,
    );
    this.name = 'JobKeyUnusableError';
  }
}

/**
 * A job of a queue whose tenant (`bullmq:<queue>`, `bullmq:<prefix>:<queue>`, with where the
 * queue is and the app's namespace: lib/jobs/job-key.ts `jobTenant`) the keys table cannot
 * hold: every claim of it would meet the table's CHECK on the tenant's length, which is no
 * passing failure (adversary 78: delayed for ever, no attempt counted).
 */
export class JobQueueTenantTooLongError extends JobRefusedError {
  constructor(where: string, tenant: string, queueName?: string) {
    const room =
      queueName === undefined
        ? ''
        : `; its queue name may be ${Math.max(0, queueNameRoom(tenant, queueName))} characters ` +
          `at most there, not ${characterCount(queueName)}`;
    super(
      `the job cannot be recorded: its queue's tenant (${firstCharacters(tenant, 40)}…, ` +
        `${characterCount(tenant)} characters: bullmq:, the namespace if given, the queue's prefix unless ` +
        `it is BullMQ's own, its name, and where it is: :db<n>: on a Redis database other ` +
        `than 0, <schema>: and :pg: in a schema of BullMQ's PostgreSQL backend, :ns: under a ` +
        `namespace) is over ${MAX_TENANT_ID_LENGTH} characters${room}. Give the queue (with its ` +
        `prefix, or namespace) a shorter name (${where})`,
    );
    this.name = 'JobQueueTenantTooLongError';
  }
}

/**
 * A job of a queue whose tenant PostgreSQL's text cannot hold (a NUL, or a lone surrogate, in
 * its queue's name or BullMQ prefix: lib/jobs/job-key.ts `tenantProblem`): every claim of it
 * would fail the same way (SQLSTATE 22021), which is no passing failure (adversary 99: delayed
 * for ever, no attempt counted). The tenant is shown escaped (JSON), never as it is.
 */
export class JobQueueTenantUnstorableError extends JobRefusedError {
  constructor(where: string, tenant: string, problem: string) {
    super(
      `the job cannot be recorded: its queue's tenant ${JSON.stringify(firstCharacters(tenant, 60))}` +
        `${characterCount(tenant) > 60 ? '…' : ''} (bullmq:, the namespace if given, the ` +
        `queue's prefix unless it is BullMQ's own, its name) ${problem}, which PostgreSQL ` +
        'cannot store: every claim of the job would fail. Give the queue a name (and prefix) ' +
        `without NUL or other control characters, in well-formed Unicode (${where})`,
    );
    this.name = 'JobQueueTenantUnstorableError';
  }
}

/**
 * A job whose worker keeps its queue where the library cannot read (a Redis client whose
 * database it cannot read, a backend other than Redis' or BullMQ's PostgreSQL one, a pool of
 * the app's whose search_path finds no BullMQ table), and whose processor gives no
 * `namespace`: its keys could meet those of another service's queue of the same name
 * (adversary 92), so it is refused rather than taken for Redis' database 0.
 */
export class JobQueueStoreUnreadableError extends JobRefusedError {
  constructor(where: string, what: string) {
    super(
      `the job cannot be recorded: its queue runs on ${what}, whose database (or schema) the ` +
        'library cannot read, so another service’s queue of the same name could share its ' +
        'keys. Give the queue’s keys a namespace of their own, one per service: ' +
        `@IdempotentJob({ namespace: 'billing' }) (${where})`,
    );
    this.name = 'JobQueueStoreUnreadableError';
  }
}

/** A job's result that cannot be kept as JSON (a BigInt, a cycle): its work rolled back. */
export class JobResultUnstorableError extends JobRefusedError {
  constructor(where: string, cause: unknown) {
    super(
      `the result of ${where} cannot be kept as JSON (${cause instanceof Error ? cause.message : String(cause)}): ` +
        'its work was rolled back. Return what JSON.stringify writes (BullMQ keeps the same JSON)',
    );
    this.name = 'JobResultUnstorableError';
  }
}

/**
 * A result over `maxResponseBytes` of a job whose steps or phases committed before it: its
 * last run rolled back, its key given back unfinished with them (see `tooLargeResult`).
 */
export class JobResultTooLargeError extends JobRefusedError {
  constructor(where: string, bytes: number, maxBytes: number) {
    super(
      `the result of ${where} is ${bytes} bytes, over maxResponseBytes (${maxBytes} bytes): it ` +
        'cannot be kept for replays, so this run was rolled back. Its steps and phases that ' +
        'committed before stay, its key unfinished: return a smaller result (or raise ' +
        'maxResponseBytes), then retry the job (job.retry()): it goes on from them',
    );
    this.name = 'JobResultTooLargeError';
  }
}

/** The library's answer kept in a job's place (a result over `maxResponseBytes`). */
export class JobAnswerRefusedError extends JobRefusedError {
  constructor(problem: string) {
    super(`the job's kept answer is the library's refusal: ${problem}`);
    this.name = 'JobAnswerRefusedError';
  }
}

/** A processor whose module does not import `IdempotencyModule`. */
export class IdempotentJobUnboundError extends JobRefusedError {
  constructor(where: string) {
    super(
      `@IdempotentJob() on ${where}: no IdempotencyModule runs it. Import IdempotencyModule ` +
        '(forRoot or forRootAsync) in the app module of the process that runs this processor',
    );
    this.name = 'IdempotentJobUnboundError';
  }
}

/** A job one of whose steps did not commit while the job moved on (see `MARK_JOB_STEP_LOST`). */
export class JobStepLostError extends JobRefusedError {
  constructor(where: string, why: string) {
    super(
      `a step of this job did not commit (${why}) after the job had moved itself on: its data ` +
        `says the step was done, so it cannot go on (${where}). Its work so far is in the ` +
        'database; see its key (keys show) and run what is missing',
    );
    this.name = 'JobStepLostError';
  }
}

/**
 * A key held by the steps of a job gone from its queue (removed, or replaced by BullMQ's
 * deduplication, between its steps) that keeps no data of its last step to go on from.
 */
export class JobStepOwnerGoneError extends JobRefusedError {
  constructor(where: string, owner: string) {
    super(
      `the job whose steps hold this key (${owner}) is gone from its queue (removed, or ` +
        'replaced by BullMQ’s deduplication, between its steps), and its key keeps no data of ' +
        'its last step to go on from (it saved its next step after it moved): this job would ' +
        `do its steps again from its first (${where}). Its work so far is in the database; ` +
        'see its key (keys show), run what is missing, then keys release it. Save the next ' +
        'step in the job’s data before it moves (updateData, then moveToDelayed)',
    );
    this.name = 'JobStepOwnerGoneError';
  }
}

/** A key first used by a job with another name or data (the library's 422 for requests). */
export class JobKeyMismatchError extends JobRefusedError {
  constructor(where: string, key: string) {
    super(
      `the key ${JSON.stringify(key)} was first used by a job with another name or data: ` +
        'another intent under the same key. A job that changes its own data (BullMQ’s step ' +
        'idiom, job.updateData) under a key of the app’s: give fingerprint: (job) => the part ' +
        `of its data that names its intent (${where})`,
    );
    this.name = 'JobKeyMismatchError';
  }
}

/**
 * A job that moved itself (`moveToDelayed`, `moveToWait`, `moveToWaitingChildren`) inside one
 * of its atomic phases (see `moveInPhaseRefusal`): the phase rolls back, and the job fails with
 * this error as its own (BullMQ's attempts), having neither stepped nor moved.
 */
export class JobMoveInPhaseError extends Error {
  constructor(where: string, reason: string) {
    super(`${reason} (${where})`);
    this.name = 'JobMoveInPhaseError';
  }
}
