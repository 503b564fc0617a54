/**
 * Adversary 56's BullMQ worker app, a process of its own (as test/support/adv55-worker.ts).
 *
 * One processor on QUEUE running BullMQ's step-jobs idiom
 * (https://docs.bullmq.io/patterns/process-step-jobs): step `first` inserts a `steps` row,
 * `job.updateData`s the next step, `job.moveToDelayed(now + STEP_DELAY_MS, token)` and throws
 * `DelayedError`; step `second` inserts its row and returns. KEYED=1 keys it by
 * `data.orderId`; LEASE_MS sets `leaseMs`, ONE_COMMIT=1 `oneCommit`; CONCURRENCY the worker's
 * concurrency (1 by default); FAIL_SECOND=1 fails step two for good (`UnrecoverableError`).
 *
 * OUTAGE=1: the database goes down as step one ends, after the job moved itself;
 * OUTAGE=before-move: after its updateData, before its move (its step's commit meets it): through ADMIN_URL (the server's maintenance database) its database refuses
 * new connections and the worker's sessions are ended; the worker prints `outage` and the test brings
 * it back (`ALLOW_CONNECTIONS true`).
 *
 * Prints `ready`, and `ran <queue> <job id> <step>` when the processor's work starts.
 */
import 'reflect-metadata';
import { Module } from '@nestjs/common';
import { ModuleRef, NestFactory } from '@nestjs/core';
import { BullModule, Processor, WorkerHost } from '@nestjs/bullmq';
import { TypeOrmModule } from '@nestjs/typeorm';
import { DelayedError, type Job, UnrecoverableError } from 'bullmq';
import { Client } from 'pg';
import { DataSource } from 'typeorm';
import {
  IDEMPOTENCY_MIGRATIONS,
  IdempotencyModule,
  IdempotentJob,
  type IdempotentJobOptions,
} from '../../lib/index.js';

const env = process.env;
const queueName = env.QUEUE ?? 'steps';
const stepDelay = Number(env.STEP_DELAY_MS ?? 1000);

interface StepData {
  orderId: string;
  step?: 'first' | 'second';
}

const stepOptions: IdempotentJobOptions = {
  ...(env.KEYED === '1'
    ? {
        key: (job: { data: unknown }) => (job.data as StepData).orderId,
        fingerprint: (job: { data: unknown }) => ({ orderId: (job.data as StepData).orderId }),
      }
    : {}),
  ...(env.LEASE_MS ? { leaseMs: Number(env.LEASE_MS) } : {}),
  ...(env.ONE_COMMIT === '1' ? { oneCommit: true } : {}),
};

/** Its database refuses connections, and its sessions end: an outage, as the step commits. */
let outageDone = false;

async function outage(): Promise<void> {
  outageDone = true;
  const name = new URL(env.DATABASE_URL!).pathname.slice(1);
  const admin = new Client({ connectionString: env.ADMIN_URL });
  await admin.connect();
  try {
    await admin.query(`ALTER DATABASE ${name} ALLOW_CONNECTIONS false`);
    await admin.query(
      `SELECT pg_terminate_backend(pid) FROM pg_stat_activity
       WHERE datname = $1 AND application_name = 'adv56-worker'`,
      [name],
    );
  } finally {
    await admin.end();
  }
  console.log('outage');
}

@Processor(queueName, { concurrency: Number(env.CONCURRENCY ?? 1) })
class StepsProcessor extends WorkerHost {
  constructor(private readonly moduleRef: ModuleRef) {
    super();
  }

  process(job: Job<StepData>, token?: string): Promise<unknown> {
    return this.run(job, token);
  }

  @IdempotentJob(stepOptions)
  async run(job: Job<StepData>, token?: string) {
    const step = job.data.step ?? 'first';
    console.log(`ran ${queueName} ${job.id} ${step}`);
    if (step === 'second' && env.FAIL_SECOND === '1') {
      throw new UnrecoverableError(`step two of ${job.data.orderId} refused`);
    }
    const data = this.moduleRef.get(DataSource, { strict: false });
    await data.query('INSERT INTO steps (order_id, step) VALUES ($1, $2)', [
      job.data.orderId,
      step,
    ]);
    if (step === 'first') {
      await job.updateData({ ...job.data, step: 'second' });
      // Once: the run after it (step one again, its move refused) meets the database back.
      if (env.OUTAGE === 'before-move' && !outageDone) await outage();
      await job.moveToDelayed(Date.now() + stepDelay, token);
      if (env.OUTAGE === '1' && !outageDone) await outage();
      throw new DelayedError();
    }
    return { done: job.data.orderId };
  }
}

@Module({
  imports: [
    TypeOrmModule.forRoot({
      type: 'postgres',
      url: env.DATABASE_URL,
      migrations: [...IDEMPOTENCY_MIGRATIONS],
      migrationsRun: true,
      logging: false,
      extra: { application_name: 'adv56-worker' },
    }),
    IdempotencyModule.forRoot({ globalKeys: true }),
    BullModule.forRoot({ connection: { host: '127.0.0.1', port: Number(env.REDIS_PORT) } }),
    BullModule.registerQueue({ name: queueName }),
  ],
  providers: [StepsProcessor],
})
class WorkerModule {}

const app = await NestFactory.createApplicationContext(WorkerModule, { logger: ['error', 'warn'] });
app.enableShutdownHooks();
console.log('ready');
