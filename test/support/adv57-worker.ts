/**
 * Adversary 57's BullMQ worker app, a process of its own (as test/support/adv56-worker.ts).
 *
 * One processor on QUEUE running BullMQ's step-jobs idiom
 * (https://docs.bullmq.io/patterns/process-step-jobs) under `@IdempotentJob()`: step `first`
 * inserts a `steps` row, `job.updateData`s the next step, prints `holding <job id>` and waits
 * HOLD_MS (0 by default), then `job.moveToDelayed(now + STEP_DELAY_MS, token)` and throws
 * `DelayedError`; step `second` inserts its row and returns. LOCK_MS and STALLED_MS set the
 * worker's `lockDuration` and `stalledInterval` (a crashed worker's job is run again once its
 * lock ran out).
 *
 * Prints `ready`, and `ran <queue> <job id> <step>` when the processor's work starts.
 */
import 'reflect-metadata';
import { Module } from '@nestjs/common';
import { ModuleRef, NestFactory } from '@nestjs/core';
import { BullModule, Processor, WorkerHost } from '@nestjs/bullmq';
import { TypeOrmModule } from '@nestjs/typeorm';
import { DelayedError, type Job } from 'bullmq';
import { DataSource } from 'typeorm';
import { IDEMPOTENCY_MIGRATIONS, IdempotencyModule, IdempotentJob } from '../../lib/index.js';

const env = process.env;
const queueName = env.QUEUE ?? 'steps';
const stepDelay = Number(env.STEP_DELAY_MS ?? 300);
const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

interface StepData {
  orderId: string;
  step?: 'first' | 'second';
}

@Processor(queueName, {
  lockDuration: Number(env.LOCK_MS ?? 30_000),
  stalledInterval: Number(env.STALLED_MS ?? 30_000),
  maxStalledCount: 5,
})
class StepsProcessor extends WorkerHost {
  constructor(private readonly moduleRef: ModuleRef) {
    super();
  }

  @IdempotentJob()
  async process(job: Job<StepData>, token?: string) {
    const step = job.data.step ?? 'first';
    console.log(`ran ${queueName} ${job.id} ${step}`);
    const data = this.moduleRef.get(DataSource, { strict: false });
    await data.query('INSERT INTO steps (order_id, step) VALUES ($1, $2)', [
      job.data.orderId,
      step,
    ]);
    if (step === 'first') {
      await job.updateData({ ...job.data, step: 'second' });
      console.log(`holding ${job.id}`);
      await sleep(Number(env.HOLD_MS ?? 0));
      await job.moveToDelayed(Date.now() + stepDelay, token);
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
