/**
 * Adversary 57: a flow's parent whose children are done by the time it checks
 * (`job.moveToWaitingChildren(token)` answers false, BullMQ's idiom for "go on") goes on in a
 * transaction the check already committed: its last write commits on its own, the job then
 * fails saying "nothing of it committed", and each of its attempts writes it again.
 *
 * The app: BullMQ's step idiom with children (https://docs.bullmq.io/patterns/process-step-jobs,
 * "Processing a parent job": `const shouldWait = await job.moveToWaitingChildren(token); if
 * (!shouldWait) { ...go on... } else throw new WaitingChildrenError()`), under
 * `@IdempotentJob()` (keyed by its id, the default), its writes through the pool seam. Step one
 * writes `first`, adds a child (`parent: { id: job.id, queue: job.queueQualifiedName }`),
 * saves its next step (`job.updateData`) and waits for its child (WaitingChildrenError). Once
 * the child completed, its next run checks again (`moveToWaitingChildren` answers false: no
 * child pending), reads its children's values and writes `final`, and returns the total. The
 * job has `attempts: 3`.
 *
 * What happens: the check is a step move to the library (`STEP_MOVES`, lib/jobs/job-steps.ts:
 * `moveToWaitingChildren` first runs `commitStep`, lib/jobs/idempotent-jobs.service.ts
 * `commitStep` → `transaction.commitWith(RELEASE_JOB_STEP)`): the job's transaction commits
 * with its key unfinished, whatever BullMQ then answers. When BullMQ answers false the job has
 * not moved and goes on, in a transaction that has ended: its `final` write is sent apart, in
 * autocommit (request-transaction.ts `send` → `apart`), and commits on its own; its result then
 * meets the ended transaction (`commitAnswer` → `finishIn` → TransactionEndedError), the key is
 * not finished, and the job fails with "the job's result was not kept, nothing of it committed:
 * The idempotent request’s transaction was rolled back ...". BullMQ's attempts run it again:
 * each writes `final` again (three `final` rows), and it ends failed, its key started and
 * held by the job (`bullmq:step`), where without the library it completes with one `final`.
 *
 * Expected (docs/guides/jobs.md, "What BullMQ sees"): "moves itself and throws ...
 * `WaitingChildrenError` ... | the same as without the library: what it did so far commits, its
 * key stays unfinished ... and its next run goes on"; "runs and commits | completed, its
 * result"; the job's database work and its record "commit in one transaction" — a check that
 * did not move the job is no step, and the write after it commits with the job's result, once.
 *
 * Control: the same flow without the library completes (`first`, `final`); with the library, a
 * parent whose next run does not check again (it goes on from its saved step) completes too.
 *
 * Severity: critical (effects run once per attempt, outside the job's transaction; the job
 * fails with a reason that says nothing committed; its key stays held).
 *
 * Fixed: `moveToWaitingChildren` moves first (lib/jobs/job-steps.ts `stepJob`): where it answers
 * false nothing commits and the job goes on in its transaction; where it moved, its step commits.
 */
import 'reflect-metadata';
import { Module, type INestApplicationContext } from '@nestjs/common';
import { NestFactory } from '@nestjs/core';
import { BullModule, Processor, WorkerHost } from '@nestjs/bullmq';
import { type Job, Queue, QueueEvents, WaitingChildrenError, Worker } from 'bullmq';
import { Pool } from 'pg';
import { IdempotencyModule, IdempotentJob } from '../../../lib/index.js';
import { until } from '../../support/brokers.js';
import { onRedis } from '../../support/job-queues.js';
import { createMigratedDatabase, type MigratedDatabase } from '../../support/migrated-database.js';
import { startTestRedis, type TestRedis } from '../../support/redis-server.js';

let redis: TestRedis;
let database: MigratedDatabase;
let pool: Pool;

interface Order {
  orderId: string;
  step?: 'first' | 'wait';
}

/** BullMQ's step idiom with children (docs.bullmq.io/patterns/process-step-jobs). */
async function steps(
  job: Job<Order>,
  token: string | undefined,
  kids: Queue,
  recheck: boolean,
): Promise<unknown> {
  const step = job.data.step ?? 'first';
  if (step === 'first') {
    await pool.query(`INSERT INTO steps (order_id, step) VALUES ($1, 'first')`, [job.data.orderId]);
    await kids.add(
      'kid',
      { cents: 300 },
      { parent: { id: job.id!, queue: job.queueQualifiedName } },
    );
    await job.updateData({ ...job.data, step: 'wait' });
  }
  // Its first run waits for the child; its next one checks again (BullMQ's idiom), or not.
  if (step === 'first' || recheck) {
    const shouldWait = await job.moveToWaitingChildren(token!);
    if (shouldWait) throw new WaitingChildrenError();
  }
  const values = Object.values(await job.getChildrenValues<{ cents: number }>());
  const total = values.reduce((sum, value) => sum + value.cents, 0);
  await pool.query(`INSERT INTO steps (order_id, step) VALUES ($1, 'final')`, [job.data.orderId]);
  return { total };
}

async function startApp(
  queue: string,
  decorated: boolean,
  recheck: boolean,
): Promise<INestApplicationContext> {
  const kids = new Queue(`${queue}-kids`, { connection: { port: redis.port } });
  @Processor(queue)
  class Plain extends WorkerHost {
    process(job: Job<Order>, token?: string) {
      return steps(job, token, kids, recheck);
    }
  }
  @Processor(queue)
  class Decorated extends WorkerHost {
    @IdempotentJob()
    process(job: Job<Order>, token?: string) {
      return steps(job, token, kids, recheck);
    }
  }
  @Module({
    imports: [
      IdempotencyModule.forRoot({ globalKeys: true, pool }),
      BullModule.forRoot({ connection: { host: '127.0.0.1', port: redis.port } }),
      BullModule.registerQueue({ name: queue }),
    ],
    providers: [decorated ? Decorated : Plain],
  })
  class AppModule {}
  const app = await NestFactory.createApplicationContext(AppModule, { logger: ['error', 'warn'] });
  const close = app.close.bind(app);
  app.close = async () => {
    await close();
    await kids.close();
  };
  return app;
}

async function runFlow(queueName: string, decorated: boolean, recheck = true) {
  const app = await startApp(queueName, decorated, recheck);
  const connection = { port: redis.port };
  const queue = new Queue(queueName, { connection });
  const events = new QueueEvents(queueName, { connection });
  let kidWorker: Worker | undefined;
  try {
    await events.waitUntilReady();
    const job = await queue.add('order', { orderId: queueName }, { attempts: 3 });
    await until(
      async () => (await queue.getJobState(job.id!)) === 'waiting-children',
      'the parent to wait for its child',
    );
    kidWorker = new Worker(`${queueName}-kids`, async (kid) => kid.data as unknown, { connection });
    const outcome = await job.waitUntilFinished(events, 20_000).then(
      (value: unknown) => ({ completed: value }),
      (error: Error) => ({ failed: error.message }),
    );
    const { rows } = await pool.query<{ step: string }>(
      'SELECT step FROM steps WHERE order_id = $1 ORDER BY id',
      [queueName],
    );
    return { outcome, steps: rows.map((row) => row.step) };
  } finally {
    await kidWorker?.close();
    await events.close();
    await queue.close();
    await app.close();
  }
}

onRedis('adversary 57: a flow parent whose children are done when it checks', () => {
  beforeAll(async () => {
    redis = await startTestRedis();
    database = await createMigratedDatabase('adv57_children_done');
    pool = new Pool({ connectionString: database.url, max: 4 });
    await pool.query(
      'CREATE TABLE steps (id serial PRIMARY KEY, order_id text NOT NULL, step text NOT NULL)',
    );
  }, 60_000);

  afterAll(async () => {
    await pool?.end();
    await database?.drop();
    await redis?.stop();
  });

  it('control: without the library, the parent checks again and completes', async () => {
    expect(await runFlow('plain', false)).toEqual({
      outcome: { completed: { total: 300 } },
      steps: ['first', 'final'],
    });
  }, 60_000);

  it('control: with @IdempotentJob(), a parent that does not check again completes', async () => {
    expect(await runFlow('no-recheck', true, false)).toEqual({
      outcome: { completed: { total: 300 } },
      steps: ['first', 'final'],
    });
  }, 60_000);

  it('with @IdempotentJob(), a parent whose children are done when it checks completes once', async () => {
    // Fails: { outcome: { failed: "the job's result was not kept, nothing of it committed:
    // ... rolled back ..." }, steps: ['first', 'final', 'final', 'final'] }.
    expect(await runFlow('recheck', true)).toEqual({
      outcome: { completed: { total: 300 } },
      steps: ['first', 'final'],
    });
  }, 60_000);
});
