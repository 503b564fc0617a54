/**
 * Adversary 55's BullMQ worker app, a process of its own (as test/support/job-worker.ts).
 *
 * MODE=steps: one processor on QUEUE running BullMQ's step-jobs idiom
 * (https://docs.bullmq.io/patterns/process-step-jobs): its step is in its data; step `first`
 * inserts a `steps` row (account `data.account`, `a1` by default), `job.updateData`s the
 * next step, `job.moveToDelayed(now + STEP_DELAY_MS, token)` and throws `DelayedError`; step
 * `second` inserts its row (account `data.finalAccount`, none by default) and returns. KEYED=1
 * keys it by `data.orderId`; ONE_COMMIT=1 and ISOLATION set those options; PHASES=1 makes a
 * call out (`PhaseRunner.call`, printing `called <phase> <key>`) at the start of each step;
 * IDEMPOTENT=0 runs it without the library (the control).
 *
 * MODE=factory: two processors made by one factory function (the same class name), on queues
 * `emails` (keyed by the job's id) and `refunds` (keyed by `data.refundId`); each inserts a
 * `steps` row. ONLY_REFUNDS=1 registers the refunds processor alone (the control).
 *
 * Prints `ready`, and `ran <queue> <job id> <step>` when a processor's work starts.
 */
import 'reflect-metadata';
import { Module, type Type } from '@nestjs/common';
import { ModuleRef, NestFactory } from '@nestjs/core';
import { BullModule, Processor, WorkerHost } from '@nestjs/bullmq';
import { TypeOrmModule } from '@nestjs/typeorm';
import { DelayedError, type Job } from 'bullmq';
import { DataSource } from 'typeorm';
import {
  IDEMPOTENCY_MIGRATIONS,
  IdempotencyModule,
  IdempotentJob,
  type IdempotentJobOptions,
  PhaseRunner,
} from '../../lib/index.js';

const env = process.env;
const idempotent = env.IDEMPOTENT !== '0';
const queueName = env.QUEUE ?? 'steps';
const stepDelay = Number(env.STEP_DELAY_MS ?? 1000);

interface StepData {
  orderId: string;
  account?: string;
  /** The account of step two's row (none by default). */
  finalAccount?: string;
  step?: 'first' | 'second';
}

function query(moduleRef: ModuleRef, text: string, values: unknown[]): Promise<unknown> {
  return moduleRef.get(DataSource, { strict: false }).query(text, values);
}

const stepOptions: IdempotentJobOptions = {
  ...(env.KEYED === '1' ? { key: (job: { data: unknown }) => (job.data as StepData).orderId } : {}),
  // FINGERPRINT=order: the intent is the order, not the data its steps update (jobs.md).
  ...(env.FINGERPRINT === 'order'
    ? { fingerprint: (job: { data: unknown }) => ({ orderId: (job.data as StepData).orderId }) }
    : {}),
  ...(env.ONE_COMMIT === '1' ? { oneCommit: true } : {}),
  ...(env.ISOLATION ? { isolationLevel: env.ISOLATION as 'SERIALIZABLE' } : {}),
};

@Processor(queueName)
class StepsProcessor extends WorkerHost {
  constructor(private readonly moduleRef: ModuleRef) {
    super();
  }

  process(job: Job<StepData>, token?: string): Promise<unknown> {
    return idempotent ? this.run(job, token) : this.steps(job, token);
  }

  @IdempotentJob(stepOptions)
  run(job: Job<StepData>, token?: string) {
    return this.steps(job, token);
  }

  /** A call out in a phase of its own (PHASES=1): prints `called <phase> <its key>`. */
  private callOut(phase: string): Promise<unknown> {
    const phases = this.moduleRef.get(PhaseRunner, { strict: false });
    return phases.call(phase, ({ idempotencyKey }) => {
      console.log(`called ${phase} ${idempotencyKey}`);
      return Promise.resolve({ phase });
    });
  }

  private async steps(job: Job<StepData>, token?: string): Promise<unknown> {
    const step = job.data.step ?? 'first';
    console.log(`ran ${queueName} ${job.id} ${step}`);
    if (env.PHASES === '1') await this.callOut(step === 'first' ? 'charged' : 'captured');
    if (step === 'first') {
      await query(
        this.moduleRef,
        'INSERT INTO steps (order_id, step, account) VALUES ($1, $2, $3)',
        [job.data.orderId, 'first', job.data.account ?? 'a1'],
      );
      await job.updateData({ ...job.data, step: 'second' });
      await job.moveToDelayed(Date.now() + stepDelay, token);
      throw new DelayedError();
    }
    await query(this.moduleRef, 'INSERT INTO steps (order_id, step, account) VALUES ($1, $2, $3)', [
      job.data.orderId,
      'second',
      job.data.finalAccount ?? null,
    ]);
    return { done: job.data.orderId };
  }
}

/** A processor per queue, made by one function: its class is named the same each time. */
function processorFor(queue: string, options: IdempotentJobOptions): Type<WorkerHost> {
  @Processor(queue)
  class QueueProcessor extends WorkerHost {
    constructor(private readonly moduleRef: ModuleRef) {
      super();
    }

    @IdempotentJob(options)
    async process(job: Job<{ orderId: string }>) {
      console.log(`ran ${queue} ${job.id} only`);
      await query(this.moduleRef, 'INSERT INTO steps (order_id, step) VALUES ($1, $2)', [
        job.data.orderId,
        queue,
      ]);
      return { done: job.data.orderId, queue };
    }
  }
  return QueueProcessor;
}

const factory = env.MODE === 'factory';
const processors: Type<unknown>[] = factory
  ? [
      ...(env.ONLY_REFUNDS === '1' ? [] : [processorFor('emails', {})]),
      processorFor('refunds', { key: (job) => (job.data as { refundId: string }).refundId }),
    ]
  : [StepsProcessor];
const queues = factory ? ['emails', 'refunds'] : [queueName];

@Module({
  imports: [
    TypeOrmModule.forRoot({
      type: 'postgres',
      url: env.DATABASE_URL,
      migrations: [...IDEMPOTENCY_MIGRATIONS],
      migrationsRun: true,
      logging: false,
    }),
    IdempotencyModule.forRoot({ globalKeys: true }),
    BullModule.forRoot({ connection: { host: '127.0.0.1', port: Number(env.REDIS_PORT) } }),
    ...queues.map((name) => BullModule.registerQueue({ name })),
  ],
  providers: processors,
})
class WorkerModule {}

const app = await NestFactory.createApplicationContext(WorkerModule, { logger: ['error', 'warn'] });
app.enableShutdownHooks();
console.log('ready');
