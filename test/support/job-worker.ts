/**
 * A BullMQ worker app of its own process, for the job tests: a Nest application context with
 * `@nestjs/bullmq` whose processor pays a payout into PostgreSQL through `@IdempotentJob()`
 * (or without it: IDEMPOTENT=0, the control). A real process, so that a test can kill it where
 * it needs to, and so that two workers' locks are two processes' as in production.
 *
 * Env: DATABASE_URL; REDIS_PORT; QUEUE; CONCURRENCY (BullMQ's, 1 by default); WORKER (its name
 * in the rows it writes); IDEMPOTENT
 * (1 by default); KEYED=1 keys jobs by `data.orderId` (the decorator's `key`); LOCK_MS (BullMQ's
 * lockDuration), STALLED_MS (stalledInterval), SKIP_LOCK_RENEWAL=1 (its lock runs out while the
 * job runs: a stalled job whose worker goes on); HOLD_MS holds the job after its write, inside
 * its transaction; HOLD_AFTER_COMMIT_MS holds it after its work committed, before BullMQ hears
 * of it (the test kills it there), printing `committed <job id>` first; FAIL_FIRST=1 throws
 * after the write on the job's first attempt. PSP_URL: the job calls that server first
 * (`PhaseRunner.call`, its derived key in an Idempotency-Key header), then records the payout. SEAM=pool joins through a node-postgres pool (as
 * Prisma, Drizzle and Kysely do) instead of TypeORM (the schema must be there). Prints `ready` once its worker runs, and
 * `ran <job id> <attempt>` each time the processor's work starts.
 */
import 'reflect-metadata';
import { Module } from '@nestjs/common';
import { ModuleRef, NestFactory } from '@nestjs/core';
import { BullModule, Processor, WorkerHost } from '@nestjs/bullmq';
import { TypeOrmModule } from '@nestjs/typeorm';
import { type Job } from 'bullmq';
import { Pool } from 'pg';
import { DataSource } from 'typeorm';
import {
  IDEMPOTENCY_MIGRATIONS,
  IdempotencyModule,
  IdempotentJob,
  PhaseRunner,
} from '../../lib/index.js';

const env = process.env;
const worker = env.WORKER ?? 'worker';
const idempotent = env.IDEMPOTENT !== '0';
const pool =
  env.SEAM === 'pool' ? new Pool({ connectionString: env.DATABASE_URL, max: 4 }) : undefined;
// An idle connection the server ends (a restart) is said, not a crash of the worker.
pool?.on('error', (error) => console.error(`the pool's idle connection failed: ${error.message}`));
/** LEASE_MS: the module's lease (its takeover after a crash comes after it). */
const lease = env.LEASE_MS ? { leaseMs: Number(env.LEASE_MS) } : {};
const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

/** A payout job's data. */
interface Payout {
  orderId: string;
  cents: number;
}

@Processor(env.QUEUE ?? 'payouts', {
  lockDuration: Number(env.LOCK_MS ?? 30_000),
  stalledInterval: Number(env.STALLED_MS ?? 30_000),
  skipLockRenewal: env.SKIP_LOCK_RENEWAL === '1',
  maxStalledCount: 5,
  concurrency: Number(env.CONCURRENCY ?? 1),
})
class PayoutsProcessor extends WorkerHost {
  constructor(private readonly moduleRef: ModuleRef) {
    super();
  }

  /** Its write: through the pool seam's pool, or TypeORM's DataSource. */
  private query(text: string, values: unknown[]): Promise<unknown> {
    return pool
      ? pool.query(text, values)
      : this.moduleRef.get(DataSource, { strict: false }).query(text, values);
  }

  async process(job: Job<Payout>, token?: string): Promise<unknown> {
    const result = idempotent
      ? env.KEYED === '1'
        ? await this.payKeyed(job, token)
        : await this.pay(job, token)
      : await this.payout(job);
    if (env.HOLD_AFTER_COMMIT_MS) {
      console.log(`committed ${job.id}`);
      await sleep(Number(env.HOLD_AFTER_COMMIT_MS));
    }
    return result;
  }

  @IdempotentJob()
  pay(job: Job<Payout>, _token?: string) {
    return this.payout(job);
  }

  @IdempotentJob({ key: (job) => (job.data as Payout).orderId })
  payKeyed(job: Job<Payout>, _token?: string) {
    return this.payout(job);
  }

  private async payout(job: Job<Payout>) {
    console.log(`ran ${job.id} ${job.attemptsMade}`);
    if (env.PSP_URL) return this.payThroughPsp(job);
    await this.query('INSERT INTO payouts (order_id, cents, worker) VALUES ($1, $2, $3)', [
      job.data.orderId,
      job.data.cents,
      worker,
    ]);
    if (env.HOLD_MS) await sleep(Number(env.HOLD_MS));
    if (env.FAIL_FIRST === '1' && job.attemptsMade === 0) {
      throw new Error(`the bank refused payout ${job.data.orderId} (attempt 1)`);
    }
    return { paid: job.data.cents, by: worker };
  }

  /** The PSP pays (a call out, with the phase's derived key), then the payout is recorded. */
  private async payThroughPsp(job: Job<Payout>) {
    const phases = this.moduleRef.get(PhaseRunner, { strict: false });
    const psp = await phases.call('psp_paid', async ({ idempotencyKey }) => {
      const answer = await fetch(env.PSP_URL!, {
        method: 'POST',
        headers: { 'idempotency-key': idempotencyKey, 'content-type': 'application/json' },
        body: JSON.stringify({ cents: job.data.cents }),
      });
      return (await answer.json()) as { transfer: string };
    });
    await this.query('INSERT INTO payouts (order_id, cents, worker) VALUES ($1, $2, $3)', [
      job.data.orderId,
      job.data.cents,
      worker,
    ]);
    if (env.FAIL_FIRST === '1' && job.attemptsMade === 0) {
      throw new Error(`the ledger refused payout ${job.data.orderId} (attempt 1)`);
    }
    return { paid: job.data.cents, by: worker, transfer: psp.transfer };
  }
}

@Module({
  imports: [
    ...(pool
      ? [IdempotencyModule.forRoot({ globalKeys: true, pool, ...lease })]
      : [
          TypeOrmModule.forRoot({
            type: 'postgres',
            url: env.DATABASE_URL,
            migrations: [...IDEMPOTENCY_MIGRATIONS],
            migrationsRun: true,
            logging: false,
          }),
          IdempotencyModule.forRoot({ globalKeys: true, ...lease }),
        ]),
    BullModule.forRoot({ connection: { host: '127.0.0.1', port: Number(env.REDIS_PORT) } }),
    BullModule.registerQueue({ name: env.QUEUE ?? 'payouts' }),
  ],
  providers: [PayoutsProcessor],
})
class WorkerModule {}

const app = await NestFactory.createApplicationContext(WorkerModule, { logger: ['error', 'warn'] });
app.enableShutdownHooks();
console.log('ready');
