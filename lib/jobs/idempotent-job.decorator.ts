import { SetMetadata } from '@nestjs/common';
import { IDEMPOTENT_JOB_OPTIONS } from '../shapes/idempotency.constants.js';
import { bullmqErrors } from './bullmq-errors.js';
import { IdempotentJobUnboundError } from './job-errors.js';
import { type JobLike } from './job-like.js';
import { runnerOf } from './job-registry.js';
import { type IdempotentJobOptions, resolveJobOptions } from './idempotent-job.options.js';

/** How long a job waits for its processor to be bound to the module (see `runnerOf`). */
const BIND_WAIT_MS = 10_000;

/**
 * Runs a BullMQ processor's jobs once per key (`@nestjs/bullmq`'s `WorkerHost.process`, or
 * any method a BullMQ worker calls with `(job, token)`): the job's database work and its
 * record (key, then result) commit together. A job that comes back whose work committed (a
 * stalled job run by another worker, a retry after a crash, the same key added twice) is
 * completed with its kept result without running; one whose work did not commit runs again.
 * Its repositories, `dataSource.query()` and the pool seam's clients join its transaction,
 * as on an `@Idempotent()` route; `PhaseRunner` works in it as there.
 *
 * @example
 * @Processor('payouts')
 * export class PayoutsProcessor extends WorkerHost {
 *   @IdempotentJob()
 *   async process(job: Job<PayoutJob>) {
 *     await this.payouts.insert({ orderId: job.data.orderId, cents: job.data.cents });
 *     return { paid: job.data.cents };
 *   }
 * }
 */
export function IdempotentJob(options: IdempotentJobOptions = {}): MethodDecorator {
  resolveJobOptions(options, 'processor'); // validated now: a wrong option fails at start-up
  return (target, property, descriptor: PropertyDescriptor) => {
    const process = descriptor.value as (
      job: JobLike,
      token?: string,
      signal?: AbortSignal,
    ) => Promise<unknown>;
    const where = `${target.constructor.name}.${String(property)}`;
    descriptor.value = async function idempotentJob(
      this: object,
      job: JobLike,
      token?: string,
      signal?: AbortSignal,
    ): Promise<unknown> {
      const runner = await runnerOf(this, BIND_WAIT_MS);
      if (!runner) {
        const { UnrecoverableError } = await bullmqErrors();
        throw new UnrecoverableError(new IdempotentJobUnboundError(where).message);
      }
      // The job its run gives it: the same, but for the moves that end a step (see job-steps).
      return runner.run(where, options, job as never, token, (stepped) =>
        Promise.resolve(process.call(this, stepped as JobLike, token, signal)),
      );
    };
    // Named as the method it stands for (stack traces, Nest's scanners), and taking as many
    // parameters: BullMQ makes a job's AbortSignal (`worker.cancelJob()`) only for a processor
    // that takes a third, and passes it on to the method.
    Object.defineProperty(descriptor.value, 'name', { value: process.name });
    Object.defineProperty(descriptor.value, 'length', { value: process.length });
    SetMetadata(IDEMPOTENT_JOB_OPTIONS, options)(target, property, descriptor);
    return descriptor;
  };
}
