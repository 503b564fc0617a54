/**
 * Fixed (session of 2026-12-06 fourth): a job's move (`moveToDelayed`, `moveToWait`,
 * `moveToWaitingChildren`) made while one of its atomic phases runs is refused before its step
 * commits or the job moves (lib/jobs/move-in-phase.ts `moveInPhaseRefusal`, checked in
 * `stepJob`: `JobMoveInPhaseError`, "move the job after the phase returns"): the phase rolls
 * back and the job fails with that error, as the control fails with its own; nothing moves
 * before the phase's COMMIT is known, and no "Missing lock" follows.
 *
 * Adversary 90: a step job that moves itself from inside a `PhaseRunner.run()` phase (its
 * reservation, its next step saved, its move, in the one "atomic phase of local effects") has
 * its step committed and BullMQ's move made BEFORE the phase's own transaction commits. Where
 * that commit then fails (a constraint checked at COMMIT; as well the worker killed between the
 * move and the phase's COMMIT), the reservation is rolled back, but the job's key and BullMQ
 * already say the step is done: its next run ships the order, and the job completes, its
 * reservation never made.
 *
 * User code: jobs.md's app (a `@nestjs/bullmq` processor under `@IdempotentJob()`, on the pool
 * seam: `IdempotencyModule.forRoot({ globalKeys: true, pool })`), BullMQ's step idiom (jobs.md
 * "What BullMQ sees": `job.updateData({ step })`, `job.moveToDelayed(…, token)`, `throw new
 * DelayedError()`), with the step's local effects in a phase (phases.md: "`run()`: one atomic
 * phase of local effects", jobs.md "Calls out: `PhaseRunner` ... Put the writes that must precede
 * a call in a phase of their own (`phases.run()`)"):
 *   await this.phases.run('reserve', async () => {
 *     await pool.query('INSERT INTO reservations (order_id) VALUES ($1)', [orderId]);
 *     await job.updateData({ ...job.data, step: 'ship' });
 *     await job.moveToDelayed(Date.now() + 100, token);
 *   });
 *   throw new DelayedError();
 * The reservation references its order by a foreign key checked at COMMIT (`DEFERRABLE
 * INITIALLY DEFERRED`), and the order row is not there (yet): the phase's COMMIT is refused.
 *
 * Code path: lib/jobs/job-steps.ts `stepJob` (the job's `moveToDelayed` commits its step
 * first: `commitStep`) → lib/jobs/idempotent-jobs.service.ts `commitStep` (RELEASE_JOB_STEP on
 * the job's own transaction, which holds nothing of the phase's: it commits, its key names the
 * job its step owner, its data `{ step: 'ship' }` kept; BullMQ then moves the job and gets the
 * data); lib/phases/phase-runner.service.ts `run` → `commit` (the phase's own transaction
 * commits after the work returns: its COMMIT fails, its INSERT rolled back). The job's next run
 * takes its key over and goes on from 'ship'.
 *
 * Docs quote (docs/guides/jobs.md, "What BullMQ sees"): "moves itself, but its step cannot
 * commit (a constraint checked at COMMIT, the database gone) | `moveToDelayed` (and
 * `moveToWait`): the move throws before the job moved (its step commits as it calls it): its
 * own error, rolled back, BullMQ's attempts run the step again"; "BullMQ's step idiom (the next
 * step saved in the job's data) never skips a step whose work a failure rolled back".
 *
 * Severity: high (an effect lost: the order shipped without its reservation, the job
 * completed; the refused COMMIT is seen only as the error the job threw after it had moved,
 * which BullMQ drops for a job no longer active: "Missing lock for job 1. moveToFinished").
 *
 * Fails now (the skipped case unskipped): { state: 'completed', reservations: 0,
 * shipments: 1 }, where the step without the phase (the control) fails with its own error,
 * nothing shipped.
 *
 * Control: the same step with its reservation in the job's own transaction (no phase): the
 * move throws before the job moved (the step's COMMIT refused), the job fails with its own
 * error, nothing shipped (as jobs.md says).
 *
 * Suggested fix: refuse a step's move while a phase of the job is running (a clear error:
 * move after the phase returns), or make the move wait for the phase's commit and commit the
 * step after it, so that a step never commits without the phase it was made in.
 */
import 'reflect-metadata';
import { Module } from '@nestjs/common';
import { NestFactory } from '@nestjs/core';
import { BullModule, Processor, WorkerHost } from '@nestjs/bullmq';
import { DelayedError, type Job, Queue, QueueEvents } from 'bullmq';
import { Pool } from 'pg';
import { IdempotencyModule, IdempotentJob, PhaseRunner } from '../../../lib/index.js';
import { onRedis } from '../../support/job-queues.js';
import { createMigratedDatabase, type MigratedDatabase } from '../../support/migrated-database.js';
import { startTestRedis, type TestRedis } from '../../support/redis-server.js';

let redis: TestRedis;
let database: MigratedDatabase;
let pool: Pool;

interface ShipJob {
  orderId: string;
  step?: 'reserve' | 'ship';
}

/** The step 'reserve' with its reservation in a phase of its own. */
@Processor('adv90-phase-move')
class PhasedProcessor extends WorkerHost {
  constructor(private readonly phases: PhaseRunner) {
    super();
  }

  @IdempotentJob()
  async process(job: Job<ShipJob>, token?: string) {
    if ((job.data.step ?? 'reserve') === 'reserve') {
      await this.phases.run('reserve', async () => {
        await pool.query('INSERT INTO reservations (order_id) VALUES ($1)', [job.data.orderId]);
        await job.updateData({ ...job.data, step: 'ship' });
        await job.moveToDelayed(Date.now() + 100, token);
      });
      throw new DelayedError();
    }
    await pool.query('INSERT INTO shipments (order_id) VALUES ($1)', [job.data.orderId]);
    return { shipped: job.data.orderId };
  }
}

/** The same step, its reservation in the job's own transaction. */
@Processor('adv90-plain-move')
class PlainProcessor extends WorkerHost {
  @IdempotentJob()
  async process(job: Job<ShipJob>, token?: string) {
    if ((job.data.step ?? 'reserve') === 'reserve') {
      await pool.query('INSERT INTO reservations (order_id) VALUES ($1)', [job.data.orderId]);
      await job.updateData({ ...job.data, step: 'ship' });
      await job.moveToDelayed(Date.now() + 100, token);
      throw new DelayedError();
    }
    await pool.query('INSERT INTO shipments (order_id) VALUES ($1)', [job.data.orderId]);
    return { shipped: job.data.orderId };
  }
}

async function ship(queueName: string, processor: object, orderId: string) {
  @Module({
    imports: [
      IdempotencyModule.forRoot({ globalKeys: true, pool }),
      BullModule.forRoot({ connection: { host: '127.0.0.1', port: redis.port } }),
      BullModule.registerQueue({ name: queueName }),
    ],
    providers: [processor as never],
  })
  class AppModule {}
  const app = await NestFactory.createApplicationContext(AppModule, { logger: [] });
  const queue = new Queue<ShipJob>(queueName, { connection: { port: redis.port } });
  const events = new QueueEvents(queueName, { connection: { port: redis.port } });
  try {
    await events.waitUntilReady();
    const added = await queue.add('ship', { orderId }, { attempts: 1 });
    let state = await added.getState();
    for (let i = 0; i < 150 && state !== 'completed' && state !== 'failed'; i++) {
      await new Promise((resolve) => setTimeout(resolve, 100));
      state = await (await queue.getJob(added.id!))!.getState();
    }
    const { rows } = await pool.query<{ reservations: number; shipments: number }>(
      `SELECT (SELECT count(*)::int FROM reservations WHERE order_id = $1) AS reservations,
              (SELECT count(*)::int FROM shipments WHERE order_id = $1) AS shipments`,
      [orderId],
    );
    return { state, ...rows[0] };
  } finally {
    await events.close();
    await queue.close();
    await app.close();
  }
}

onRedis('adversary 90: a step job that moves itself inside a phase', () => {
  beforeAll(async () => {
    redis = await startTestRedis();
    database = await createMigratedDatabase('adv90_move_in_phase');
    pool = new Pool({ connectionString: database.url, max: 6 });
    await pool.query('CREATE TABLE orders (id text PRIMARY KEY)');
    // A reservation names its order, checked at COMMIT; the orders are not there.
    await pool.query(`CREATE TABLE reservations (order_id text NOT NULL
      REFERENCES orders (id) DEFERRABLE INITIALLY DEFERRED)`);
    await pool.query('CREATE TABLE shipments (order_id text NOT NULL)');
  }, 60_000);

  afterAll(async () => {
    await pool?.end();
    await database?.drop();
    await redis?.stop();
  });

  it('control: its reservation in its own transaction, refused at COMMIT: the move throws, nothing ships', async () => {
    expect(await ship('adv90-plain-move', PlainProcessor, 'o-plain')).toEqual({
      state: 'failed',
      reservations: 0,
      shipments: 0,
    });
  }, 30_000);

  it('its reservation in a phase, refused at COMMIT: the job never ships without it', async () => {
    expect(await ship('adv90-phase-move', PhasedProcessor, 'o-phase')).toEqual({
      state: 'failed',
      reservations: 0,
      shipments: 0,
    });
  }, 30_000);
});
