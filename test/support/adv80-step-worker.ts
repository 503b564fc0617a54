/**
 * Adversary 80's step job worker (a process of its own, so that the test can SIGKILL it
 * mid-step): BullMQ's step idiom through `@IdempotentJob()`, as jobs.md's guide has it. Step
 * `reserve` writes a reservation, saves its next step (`updateData`), moves itself to the
 * delayed set and throws `DelayedError`; step `capture` calls the PSP through `PhaseRunner`
 * (the call recorded in `psp_calls` with its derived key, outside the job's transaction), then
 * writes the capture and returns.
 *
 * Env: DATABASE_URL; REDIS_PORT; WORKER (its name); DIE_AFTER_CALL=1 prints `called <job id>`
 * after the PSP call and hangs (the test SIGKILLs it there); FAIL_AFTER_CALL=1 throws after
 * the PSP call instead. BullMQ's worker: lockDuration 2 s, stalledInterval 1 s,
 * maxStalledCount 0 (a stalled job fails for good rather than run again unattended). Prints
 * `ready` once its worker runs.
 */
import 'reflect-metadata';
import { Module } from '@nestjs/common';
import { NestFactory } from '@nestjs/core';
import { BullModule, Processor, WorkerHost } from '@nestjs/bullmq';
import { DelayedError, type Job } from 'bullmq';
import { Pool } from 'pg';
import { IdempotencyModule, IdempotentJob, PhaseRunner } from '../../lib/index.js';

const env = process.env;
const worker = env.WORKER ?? 'worker';
/** The app's pool (the library's seam joins its queries to the job's transaction). */
const pool = new Pool({ connectionString: env.DATABASE_URL, max: 4 });
/** The PSP's own books: another system, outside the job's transaction. */
const psp = new Pool({ connectionString: env.DATABASE_URL, max: 2 });

interface Charge {
  orderId: string;
  step: 'reserve' | 'capture';
}

@Processor('charges', { lockDuration: 2_000, stalledInterval: 1_000, maxStalledCount: 0 })
class ChargesProcessor extends WorkerHost {
  constructor(private readonly phases: PhaseRunner) {
    super();
  }

  @IdempotentJob()
  async process(job: Job<Charge>, token?: string): Promise<unknown> {
    if (job.data.step === 'reserve') {
      await pool.query('INSERT INTO reservations (order_id) VALUES ($1)', [job.data.orderId]);
      await job.updateData({ ...job.data, step: 'capture' });
      await job.moveToDelayed(Date.now() + 200, token);
      throw new DelayedError();
    }
    const capture = await this.phases.call('psp_captured', async ({ idempotencyKey }) => {
      await psp.query(
        'INSERT INTO psp_calls (order_id, idempotency_key, worker) VALUES ($1, $2, $3)',
        [job.data.orderId, idempotencyKey, worker],
      );
      return { pspId: idempotencyKey };
    });
    if (env.DIE_AFTER_CALL === '1') {
      console.log(`called ${job.id}`);
      await new Promise(() => undefined);
    }
    if (env.FAIL_AFTER_CALL === '1') throw new Error('the ledger refused the capture');
    await pool.query('INSERT INTO captures (order_id) VALUES ($1)', [job.data.orderId]);
    return { captured: capture.pspId };
  }
}

@Module({
  imports: [
    IdempotencyModule.forRoot({ globalKeys: true, pool }),
    BullModule.forRoot({ connection: { host: '127.0.0.1', port: Number(env.REDIS_PORT) } }),
    BullModule.registerQueue({ name: 'charges' }),
  ],
  providers: [ChargesProcessor],
})
class WorkerModule {}

const app = await NestFactory.createApplicationContext(WorkerModule, { logger: ['error', 'warn'] });
app.enableShutdownHooks();
console.log('ready');
