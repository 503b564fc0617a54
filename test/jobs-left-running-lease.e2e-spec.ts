import 'reflect-metadata';
import { Injectable, type INestApplicationContext, Module } from '@nestjs/common';
import { NestFactory } from '@nestjs/core';
import { Pool } from 'pg';
import { IdempotencyModule, IdempotentJob } from '../lib/index.js';
import { type JobLike } from '../lib/jobs/job-like.js';
import { createMigratedDatabase, type MigratedDatabase } from './support/migrated-database.js';

/**
 * An `@IdempotentJob()` processor whose work leaves a statement running (one it gave up on, as
 * Kysely's default `'ignore query'` abort does) past its short lease:
 * the job's commit waits for that statement, and the key's heartbeat renews the lease until the
 * statement is done (`heartbeatStop`, lib/claim/lease-renewals.ts). The same job run by another
 * worker meanwhile (BullMQ hands a job whose lock it thinks lost to another: a stalled job) is
 * told its key is in progress, and the work runs once, one row kept. Before, the heartbeat
 * stopped when the work settled: the second worker took the key over and paid again, and the
 * first's commit found its fence lost. The processor is called as BullMQ's worker calls it,
 * with the job (no Redis needed: the key is the job's id and queue).
 */
let pool: Pool;
const runs = new Map<string, number>();

@Injectable()
class PayoutsProcessor {
  @IdempotentJob({ leaseMs: 1_000 })
  async process(job: JobLike) {
    const { orderId } = job.data as { orderId: string };
    runs.set(orderId, (runs.get(orderId) ?? 0) + 1);
    await pool.query('INSERT INTO payouts (order_id) VALUES ($1)', [orderId]);
    // Given up on after 100 ms and left running on the job's connection (as Kysely's abort
    // with `'ignore query'` leaves it): the job's commit waits for it.
    const slow = pool.query('SELECT pg_sleep(2.5)').catch(() => undefined);
    await Promise.race([slow, new Promise((resolve) => setTimeout(resolve, 100))]);
    return { paid: orderId };
  }
}

/** A BullMQ job as the processor gets it: its id (and when it was added: its key), its data. */
function jobOf(orderId: string, timestamp: number): JobLike {
  return {
    id: orderId,
    name: 'payout',
    queueName: 'payouts',
    data: { orderId },
    timestamp,
    moveToDelayed: () => Promise.resolve(),
  };
}

describe('@IdempotentJob(): work that leaves a statement running past its lease (pool seam)', () => {
  let database: MigratedDatabase;
  let app: INestApplicationContext;

  beforeAll(async () => {
    database = await createMigratedDatabase('jobs_left_running');
    pool = new Pool({ connectionString: database.url, max: 6 });
    pool.on('error', () => undefined);
    await pool.query('CREATE TABLE payouts (order_id text NOT NULL)');
    @Module({
      imports: [IdempotencyModule.forRoot({ globalKeys: true, pool, databaseTimeoutMs: 3_000 })],
      providers: [PayoutsProcessor],
    })
    class AppModule {}
    app = await NestFactory.createApplicationContext(AppModule, { logger: false });
  }, 60_000);

  afterAll(async () => {
    await app?.close();
    await pool?.end();
    await database?.drop();
  });

  it('a second worker meanwhile is told the key is in progress: one run, one row', async () => {
    const processor = app.get(PayoutsProcessor);
    const run = (job: JobLike) =>
      processor.process(job).then(
        (value) => ({ completed: value }),
        (error: Error) => ({ failed: error.constructor.name }),
      );
    const added = Date.now();
    const first = run(jobOf('o-1', added));
    await new Promise((resolve) => setTimeout(resolve, 1_600)); // past one lease
    const second = await run(jobOf('o-1', added));
    const firstRun = await first;
    const { rows } = await pool.query('SELECT 1 FROM payouts WHERE order_id = $1', ['o-1']);
    expect({ first: firstRun, second, runs: runs.get('o-1'), rows: rows.length }).toEqual({
      first: { completed: { paid: 'o-1' } },
      second: { failed: 'IdempotencyKeyInProgressError' },
      runs: 1,
      rows: 1,
    });
  }, 30_000);
});
