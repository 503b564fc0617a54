/**
 * Adversary 72: a flow parent that waits for its children (`job.moveToWaitingChildren(token)`,
 * `throw new WaitingChildrenError()`) whose child finishes at once (a quick child on a worker
 * of its own) has its step done TWICE: its next run, taken by the worker's other slot as the
 * child's end moved it back to wait, read BullMQ's data of before the step and takes the key
 * over once the step has committed. It runs the step again, on top of the committed one: 4
 * to 8 parents in 30.
 *
 * The app: BullMQ's parent idiom (https://docs.bullmq.io/patterns/process-step-jobs,
 * "Processing a parent job") under `@IdempotentJob()` (keyed by its id), worker
 * `concurrency: 4`: step 1 inserts its row, adds a child with a fixed job id (`kid-<id>`, as
 * jobs.md asks) and `parent: { id, queue }`, saves its next step (`job.updateData({ step: 2
 * })`, held) and, if `moveToWaitingChildren` moved it, throws `WaitingChildrenError` (else
 * goes on to step 2 in the same run); step 2 inserts its row and returns `{ step: 2 }`. The
 * child's processor returns at once.
 *
 * What happens: `moveToWaitingChildren` moves first; the step commits after it
 * (lib/jobs/job-steps.ts `stepJob`: `commit().then(flushStep)`, the data written to BullMQ,
 * then noted `written` on the key). The child ends within those milliseconds; BullMQ moves the
 * parent to wait; the other slot fetches it with the data of before the step. Its claim
 * comes after the note: it takes the key over (the step's owner is the same job), and
 * `dataToRestore` restores nothing since the key says BullMQ has the step's data (`written`),
 * but this run's job object was read before that write. Step 1 runs again and commits (its
 * row again; the child's add is a no-op, its id taken; `moveToWaitingChildren` answers false;
 * step 2). (The same race as `moveToWait`, adversary 72
 * move-to-wait-step; here the move comes from the child's end.)
 *
 * Expected (docs/guides/jobs.md, "What BullMQ sees"): "moves itself and throws BullMQ's
 * `DelayedError` (...; also `WaitingChildrenError` ...) | ... what it did so far commits, its
 * key stays unfinished and named the job's, and its next run goes on (its completed phases
 * kept)"; the guide's first line: "makes a job's database work happen once per key".
 *
 * Control: the same parents without the decorator: every parent does step 1 once, then step 2.
 *
 * Severity: high (a committed step's effects applied twice; BullMQ's documented parent idiom
 * with a fast child).
 *
 * Fails now: stepRows ['step 1: 34' to 'step 1: 38', 'step 2: 30'] (4-8 of 30 parents did step 1
 * twice).
 *
 * Fixed: a run given the data of before its key's last step, which BullMQ was noted to have
 * (`mayBeStale`, lib/jobs/job-steps.ts), reads the job's data afresh from BullMQ
 * (`freshDataOf`, lib/jobs/fresh-job-data.ts) before it goes on.
 */
import 'reflect-metadata';
import { Module, type INestApplicationContext } from '@nestjs/common';
import { NestFactory } from '@nestjs/core';
import { BullModule, InjectQueue, Processor, WorkerHost } from '@nestjs/bullmq';
import { type Job, Queue, QueueEvents, WaitingChildrenError } from 'bullmq';
import { Pool } from 'pg';
import { IdempotencyModule, IdempotentJob } from '../../../lib/index.js';
import { onRedis } from '../../support/job-queues.js';
import { createMigratedDatabase, type MigratedDatabase } from '../../support/migrated-database.js';
import { startTestRedis, type TestRedis } from '../../support/redis-server.js';

let redis: TestRedis;
let database: MigratedDatabase;
let pool: Pool;

const PARENTS = 30;

async function parentStep(kids: Queue, job: Job<{ step?: number }>, token?: string) {
  let step = job.data.step ?? 1;
  for (;;) {
    await pool.query('INSERT INTO steps (queue, job_id, step) VALUES ($1, $2, $3)', [
      job.queueName,
      job.id,
      step,
    ]);
    if (step !== 1) return { step };
    await kids.add(
      'kid',
      {},
      { jobId: `kid-${job.id}`, parent: { id: job.id!, queue: job.queueQualifiedName } },
    );
    await job.updateData({ step: 2 });
    if (await job.moveToWaitingChildren(token!)) throw new WaitingChildrenError();
    // Its child is done already: on to step 2 in this run.
    step = 2;
  }
}

async function startApp(parents: string, kidsName: string, decorated: boolean) {
  let processor: unknown;
  if (decorated) {
    @Processor(parents, { concurrency: 4 })
    class Parents extends WorkerHost {
      constructor(@InjectQueue(kidsName) private readonly kids: Queue) {
        super();
      }
      @IdempotentJob()
      async process(job: Job<{ step?: number }>, token?: string) {
        return parentStep(this.kids, job, token);
      }
    }
    processor = Parents;
  } else {
    @Processor(parents, { concurrency: 4 })
    class Parents extends WorkerHost {
      constructor(@InjectQueue(kidsName) private readonly kids: Queue) {
        super();
      }
      async process(job: Job<{ step?: number }>, token?: string) {
        return parentStep(this.kids, job, token);
      }
    }
    processor = Parents;
  }
  @Processor(kidsName, { concurrency: 4 })
  class Kids extends WorkerHost {
    async process() {
      return 1;
    }
  }
  @Module({
    imports: [
      IdempotencyModule.forRoot({ globalKeys: true, pool }),
      BullModule.forRoot({ connection: { host: '127.0.0.1', port: redis.port } }),
      BullModule.registerQueue({ name: parents }, { name: kidsName }),
    ],
    providers: [processor as never, Kids],
  })
  class AppModule {}
  return NestFactory.createApplicationContext(AppModule, { logger: [] });
}

async function parentsRun(name: string, decorated: boolean) {
  const app: INestApplicationContext = await startApp(name, `${name}-kids`, decorated);
  const connection = { host: '127.0.0.1', port: redis.port };
  const queue = new Queue(name, { connection });
  const events = new QueueEvents(name, { connection });
  try {
    await events.waitUntilReady();
    const results: unknown[] = [];
    for (let i = 0; i < PARENTS; i++) {
      const job = await queue.add('parent', {});
      results.push(await job.waitUntilFinished(events, 20_000));
    }
    const { rows } = await pool.query<{ step: number; n: number }>(
      'SELECT step, count(*)::int AS n FROM steps WHERE queue = $1 GROUP BY step ORDER BY step',
      [name],
    );
    return {
      notLast: results.filter((result) => (result as { step: number }).step !== 2).length,
      stepRows: rows.map((row) => `step ${row.step}: ${row.n}`),
    };
  } finally {
    await events.close();
    await queue.obliterate({ force: true }).catch(() => undefined);
    await queue.close();
    await app.close();
  }
}

onRedis('adversary 72: a flow parent moved back by a quick child, and its step', () => {
  beforeAll(async () => {
    redis = await startTestRedis();
    database = await createMigratedDatabase('adv72_children_race');
    pool = new Pool({ connectionString: database.url, max: 8 });
    await pool.query('CREATE TABLE steps (queue text NOT NULL, job_id text, step int NOT NULL)');
  }, 60_000);

  afterAll(async () => {
    await pool?.end();
    await database?.drop();
    await redis?.stop();
  });

  const expected = { notLast: 0, stepRows: [`step 1: ${PARENTS}`, `step 2: ${PARENTS}`] };

  it('control: without the decorator, each parent does step 1 once, then step 2', async () => {
    expect(await parentsRun('plain', false)).toEqual(expected);
  }, 120_000);

  it('with @IdempotentJob(): each parent does step 1 once, then step 2', async () => {
    expect(await parentsRun('decorated', true)).toEqual(expected);
  }, 120_000);
});
