import { characterCount, isWellFormedText } from '../decisions/well-formed.js';
import { InvalidIdempotencyOptionsError, resolveRouteOptions } from '../idempotency-options.js';
import { POSTGRES_CLAIM_STORE } from '../idempotency-options.js';
import {
  type IdempotencyRouteOptions,
  type ResolvedRouteOptions,
} from '../shapes/idempotency-options.interface.js';
import { type JobLike } from './job-like.js';

/** `@IdempotentJob()`'s options; the rest are the module's, as for a route. */
export interface IdempotentJobOptions extends Pick<
  IdempotencyRouteOptions,
  'leaseMs' | 'heartbeat' | 'oneCommit' | 'claimWaitMs'
> {
  /**
   * The job's key, from the job (its data): two jobs with one key are one, their effects
   * applied once, the second completed with the first one's result. A key given by two jobs
   * with other names or data fails the second (`UnrecoverableError`). Default: the job's id
   * (with the time it was added, where BullMQ counted the id).
   */
  key?: (job: JobLike) => string | number;
  /**
   * What names a keyed job's intent, compared between the jobs of one key (default: its data).
   * A job that updates its own data as it goes (BullMQ's step idiom, `job.updateData`) gives
   * the part that does not change: `(job) => ({ orderId: job.data.orderId })`. Jobs keyed by
   * their own id are not compared (a job may update its data).
   */
  fingerprint?: (job: JobLike) => unknown;
  /** Its transaction's level (default: the module's, else the server's). */
  isolationLevel?: IdempotencyRouteOptions['isolationLevel'];
  /**
   * The service's name in its queues' keys, around what the library reads of the worker (its
   * Redis database, its schema of BullMQ's PostgreSQL backend: they still tell the service's
   * queues apart): `bullmq:<namespace>:<queue>:ns:` on database 0, `bullmq:<namespace>:
   * <queue>:db<n>::ns:` on another, `bullmq:<namespace>:<schema>:<queue>:pg::ns:`. Needed where
   * the library cannot read where the queue is (Bun's Redis client, a custom adapter or
   * backend: such a job fails, saying so; the namespace and the queue are then its tenant),
   * and where two services' queues share a name on two Redis servers (or two PostgreSQL
   * databases) and keep their keys in one database. 1 to 100 characters, without `:` or
   * control characters: one per service, e.g. `'billing'`.
   */
  namespace?: string;
}

/** A job's options, resolved over the module's route defaults. */
export interface ResolvedJobOptions {
  key?: (job: JobLike) => unknown;
  fingerprint?: (job: JobLike) => unknown;
  namespace?: string;
  route: ResolvedRouteOptions;
}

/** Why a job's `namespace` cannot be one (a pure decision), or `undefined` where it can. */
export function namespaceProblem(namespace: unknown): string | undefined {
  if (typeof namespace !== 'string') return 'must be a string';
  const characters = characterCount(namespace);
  if (characters < 1 || characters > 100) return 'must be 1 to 100 characters';
  if (namespace.includes(':')) return 'must not hold ":" (it ends the namespace in the tenant)';
  // eslint-disable-next-line no-control-regex -- matching control characters is the point
  if (/[\u0000-\u001f\u007f-\u009f]/.test(namespace)) return 'must not hold control characters';
  if (!isWellFormedText(namespace)) return 'must be well-formed Unicode';
  return undefined;
}

/**
 * Validates and fills in a job's options over `base` (the module's); `where` names the
 * processor in the error a wrong option throws. Always atomic, in the app's PostgreSQL: the
 * job's record commits with its effects.
 */
export function resolveJobOptions(
  options: IdempotentJobOptions,
  where: string,
  base?: ResolvedRouteOptions,
): ResolvedJobOptions {
  if (options.key !== undefined && typeof options.key !== 'function') {
    throw new InvalidIdempotencyOptionsError(
      `@IdempotentJob() on ${where}: key must be a function`,
    );
  }
  if (options.fingerprint !== undefined && typeof options.fingerprint !== 'function') {
    throw new InvalidIdempotencyOptionsError(
      `@IdempotentJob() on ${where}: fingerprint must be a function`,
    );
  }
  if (options.namespace !== undefined) {
    const problem = namespaceProblem(options.namespace);
    if (problem) {
      throw new InvalidIdempotencyOptionsError(
        `@IdempotentJob() on ${where}: namespace ${problem}`,
      );
    }
  }
  const { key, fingerprint, namespace, ...rest } = options;
  try {
    const route = resolveRouteOptions(
      { ...rest, atomic: true, claimStore: POSTGRES_CLAIM_STORE },
      base,
    );
    return { key, fingerprint, namespace, route };
  } catch (error) {
    if (!(error instanceof InvalidIdempotencyOptionsError)) throw error;
    throw new InvalidIdempotencyOptionsError(
      `@IdempotentJob() on ${where}: ${error.message.replace(/^IdempotencyModule: /, '')}`,
    );
  }
}
