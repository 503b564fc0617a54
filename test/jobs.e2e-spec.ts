import { type ChildProcess, spawn } from 'node:child_process';
import { Queue, QueueEvents } from 'bullmq';
import { Client } from 'pg';
import { until } from './support/brokers.js';
import { createTestDatabase, type TestDatabase } from './support/database.js';
import { redisServerInstalled, startTestRedis, type TestRedis } from './support/redis-server.js';
import { compiled } from './support/worker-process.js';

/**
 * `@IdempotentJob()` on BullMQ, with real processes on a Redis and a PostgreSQL of the test's
 * own: a job's payout and its record commit together, so a job that comes back (the same key
 * added again, a retry after an error, a job taken from a worker killed after its commit, a
 * stalled job whose first worker still runs) pays once and completes with the first result.
 * Each case has its control: the same worker without the decorator pays twice.
 */
const onRedis = redisServerInstalled() || process.env.CI === 'true' ? describe : describe.skip;

interface JobWorker {
  child: ChildProcess;
  output(): string;
  kill(): Promise<void>;
}

let database: TestDatabase;
let redis: TestRedis;
let admin: Client;
const workers: JobWorker[] = [];
const queues: Queue[] = [];
const listeners: QueueEvents[] = [];

async function startJobWorker(env: Record<string, string>): Promise<JobWorker> {
  const child = spawn(process.execPath, [compiled('test/support/job-worker.js')], {
    env: {
      ...process.env,
      NODE_OPTIONS: '',
      DATABASE_URL: database.url,
      REDIS_PORT: String(redis.port),
      ...env,
    },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let output = '';
  child.stdout!.on('data', (chunk: Buffer) => (output += chunk.toString()));
  child.stderr!.on('data', (chunk: Buffer) => (output += chunk.toString()));
  const worker: JobWorker = {
    child,
    output: () => output,
    kill: () =>
      new Promise<void>((resolve) => {
        if (child.exitCode !== null || child.signalCode !== null) return resolve();
        child.once('exit', () => resolve());
        child.kill('SIGKILL');
      }),
  };
  workers.push(worker);
  await until(
    () => Promise.resolve(output.includes('ready') || child.exitCode !== null),
    `the job worker to start:\n${output}`,
    60_000,
  );
  if (child.exitCode !== null) throw new Error(`the job worker exited:\n${output}`);
  return worker;
}

function queueOf(name: string) {
  const connection = { host: '127.0.0.1', port: redis.port };
  const queue = new Queue(name, { connection });
  const events = new QueueEvents(name, { connection });
  queues.push(queue);
  listeners.push(events);
  return { queue, events };
}

async function payouts(orderId: string): Promise<{ worker: string }[]> {
  const { rows } = await admin.query<{ worker: string }>(
    'SELECT worker FROM payouts WHERE order_id = $1 ORDER BY id',
    [orderId],
  );
  return rows;
}

onRedis('@IdempotentJob() on BullMQ, with real workers', () => {
  beforeAll(async () => {
    [database, redis] = await Promise.all([createTestDatabase('jobs'), startTestRedis()]);
    admin = new Client({ connectionString: database.url });
    await admin.connect();
    await admin.query(
      `CREATE TABLE payouts (id serial PRIMARY KEY, order_id text NOT NULL, cents int NOT NULL,
         worker text NOT NULL)`,
    );
  }, 60_000);

  afterEach(async () => {
    await Promise.all(workers.splice(0).map((worker) => worker.kill()));
    await Promise.all(listeners.splice(0).map((events) => events.close()));
    await Promise.all(queues.splice(0).map((queue) => queue.close()));
  });

  afterAll(async () => {
    await admin?.end();
    await redis?.stop();
    await database?.drop();
  });

  // TypeORM first: its worker's migrations make the library's tables the pool seam uses.
  describe.each(['typeorm', 'pool'] as const)('on %s', (seam) => {
    it.each([
      ['with @IdempotentJob()', '1', ['a']],
      ['control, without it: the second add pays again', '0', ['a', 'a']],
    ])(
      'the same job id added again after the first completed: %s',
      async (_name, idempotent, expected) => {
        const name = `${seam}-again-${idempotent}`;
        await startJobWorker({ SEAM: seam, QUEUE: name, WORKER: 'a', IDEMPOTENT: idempotent });
        const { queue, events } = queueOf(name);
        const add = () =>
          queue.add(
            'payout',
            { orderId: name, cents: 500 },
            { jobId: name, removeOnComplete: true },
          );
        const first = await (await add()).waitUntilFinished(events, 30_000);
        const second = await (await add()).waitUntilFinished(events, 30_000);
        expect(first).toEqual({ paid: 500, by: 'a' });
        expect(second).toEqual(first);
        expect((await payouts(name)).map((row) => row.worker)).toEqual(expected);
      },
      60_000,
    );

    it.each([
      ['with @IdempotentJob(): the failed try rolled back, paid once', '1', 1],
      ['control, without it: the failed try paid too', '0', 2],
    ])(
      'a retry after an error: %s',
      async (_name, idempotent, rows) => {
        const name = `${seam}-retry-${idempotent}`;
        await startJobWorker({
          SEAM: seam,
          QUEUE: name,
          WORKER: 'a',
          IDEMPOTENT: idempotent,
          FAIL_FIRST: '1',
        });
        const { queue, events } = queueOf(name);
        const job = await queue.add('payout', { orderId: name, cents: 700 }, { attempts: 3 });
        expect(await job.waitUntilFinished(events, 30_000)).toEqual({ paid: 700, by: 'a' });
        expect(await payouts(name)).toHaveLength(rows);
      },
      60_000,
    );

    it.each([
      ['with @IdempotentJob(): completed with the killed worker’s result, paid once', '1', ['a']],
      ['control, without it: the second worker pays again', '0', ['a', 'b']],
    ])(
      'a worker SIGKILLed after its commit, before BullMQ heard: %s',
      async (_name, idempotent, expected) => {
        const name = `${seam}-killed-${idempotent}`;
        const stalls = {
          SEAM: seam,
          LOCK_MS: '1500',
          STALLED_MS: '500',
          IDEMPOTENT: idempotent,
          QUEUE: name,
        };
        const a = await startJobWorker({ ...stalls, WORKER: 'a', HOLD_AFTER_COMMIT_MS: '60000' });
        const { queue, events } = queueOf(name);
        const job = await queue.add('payout', { orderId: name, cents: 900 });
        const finished = job.waitUntilFinished(events, 45_000);
        await until(
          () => Promise.resolve(a.output().includes(`committed ${job.id}`)),
          `worker a's commit:\n${a.output()}`,
          30_000,
        );
        await a.kill();
        // The job's lock runs out with its worker; the next worker takes it as stalled.
        const b = await startJobWorker({ ...stalls, WORKER: 'b' });
        const result = await finished;
        expect(result).toEqual({ paid: 900, by: expected.at(-1) === 'b' ? 'b' : 'a' });
        expect((await payouts(name)).map((row) => row.worker)).toEqual(expected);
        if (idempotent === '1') expect(b.output()).not.toContain(`ran ${job.id}`);
      },
      90_000,
    );

    it.each([
      ['with @IdempotentJob(): the second waits, then completes with the first’s result', '1', 1],
      ['control, without it: both workers pay', '0', 2],
    ])(
      'a stalled job whose first worker goes on (its lock ran out): %s',
      async (_name, idempotent, rows) => {
        const name = `${seam}-stalled-${idempotent}`;
        const common = {
          SEAM: seam,
          IDEMPOTENT: idempotent,
          QUEUE: name,
          LOCK_MS: '1000',
          STALLED_MS: '300',
        };
        // Worker a's lock is not renewed: BullMQ takes the job for stalled while a still works.
        const a = await startJobWorker({
          ...common,
          WORKER: 'a',
          HOLD_MS: '4000',
          SKIP_LOCK_RENEWAL: '1',
        });
        const { queue } = queueOf(name);
        const job = await queue.add('payout', { orderId: name, cents: 300 });
        await until(() => Promise.resolve(a.output().includes(`ran ${job.id}`)), 'a', 10_000);
        await startJobWorker({ ...common, WORKER: 'b' });
        await until(
          async () => ['completed', 'failed'].includes(await job.getState()),
          'the job to end',
          45_000,
        );
        await new Promise((resolve) => setTimeout(resolve, 500));
        expect(await payouts(name)).toHaveLength(rows);
        if (idempotent === '1') {
          expect(await job.getState()).toBe('completed');
          const done = await queue.getJob(job.id!);
          expect(done?.returnvalue).toEqual({ paid: 300, by: 'a' });
        }
      },
      90_000,
    );
  });

  it('a key of the app’s (data.orderId): two jobs of one order pay once; another payout under it fails', async () => {
    const name = 'keyed';
    await startJobWorker({ QUEUE: name, WORKER: 'a', KEYED: '1' });
    const { queue, events } = queueOf(name);
    const first = await queue.add('payout', { orderId: 'order-7', cents: 100 });
    expect(await first.waitUntilFinished(events, 30_000)).toEqual({ paid: 100, by: 'a' });
    const twin = await queue.add('payout', { orderId: 'order-7', cents: 100 });
    expect(await twin.waitUntilFinished(events, 30_000)).toEqual({ paid: 100, by: 'a' });
    const other = await queue.add('payout', { orderId: 'order-7', cents: 999 }, { attempts: 5 });
    await expect(other.waitUntilFinished(events, 30_000)).rejects.toThrow(
      /@IdempotentJob\(\) on PayoutsProcessor\.payKeyed: .*key.*/i,
    );
    const failed = await queue.getJob(other.id!);
    // Failed for good at once: the same key with other data is never a retry.
    expect(failed?.attemptsMade).toBe(1);
    expect(await payouts('order-7')).toHaveLength(1);
  }, 60_000);

  it('a key it cannot keep (over 255 characters): failed at once, saying why, nothing paid', async () => {
    const name = 'unusable';
    await startJobWorker({ QUEUE: name, WORKER: 'a', KEYED: '1' });
    const { queue, events } = queueOf(name);
    const job = await queue.add('payout', { orderId: 'x'.repeat(300), cents: 1 }, { attempts: 5 });
    await expect(job.waitUntilFinished(events, 30_000)).rejects.toThrow(
      'its key is over 255 characters',
    );
    expect((await queue.getJob(job.id!))?.attemptsMade).toBe(1);
    expect(await payouts('x'.repeat(300))).toHaveLength(0);
  }, 60_000);
});
