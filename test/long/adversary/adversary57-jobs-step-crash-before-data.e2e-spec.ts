/**
 * Adversary 57: a worker killed after a step committed, before the step's saved data reached
 * Redis: the job's next run starts from step one again, on top of the committed step. Step one
 * runs twice.
 *
 * The app: BullMQ's step idiom (https://docs.bullmq.io/patterns/process-step-jobs) under
 * `@IdempotentJob()` (keyed by its id, the default), test/support/adv57-worker.ts: step one
 * inserts its row, `job.updateData({ step: 'second' })`, `job.moveToDelayed(ts, token)`, throws
 * `DelayedError`; step two inserts its row and returns. The worker's path to Redis hangs as it
 * moves on (a network partition, a stalled Redis host: test/support/tcp-proxy.ts `blackhole()`),
 * and the worker is killed there (SIGKILL, an OOM kill, a node drained). Another worker runs
 * the job once its lock ran out (BullMQ's stalled jobs).
 *
 * What happens: the move commits the step first (lib/jobs/job-steps.ts `steppedJob`:
 * `committed ??= commitStep()`, then `flush()`, then the move): step one's row and the key
 * (started, its lease ended, `bullmq:step` naming the job) commit in PostgreSQL; then the held
 * data goes to Redis (`update.call(job, data)`), which never arrives. The key holds no trace of
 * which step committed, only that the job owns it. The next run reads the job's data from
 * BullMQ (`step` unset: step one), takes its own key over (`stepHold`: its own job, no lost
 * step), and runs step one again: its row twice, then step two. The job completes.
 *
 * Expected (docs/guides/jobs.md): "A job that comes back after its work committed completes
 * with the kept result and runs nothing; one whose work did not commit ... runs again"; "What
 * BullMQ sees": "moves itself and throws BullMQ's `DelayedError` ... | ... what it did so far
 * commits, its key stays unfinished and named the job's, and its next run goes on" — from the
 * step that committed, never running it again. (The window 58d50f6 closed, data saved before
 * its work committed, is reversed here: work committed before its data was saved.)
 *
 * Control: the same worker killed once the job moved itself (its data in BullMQ, the job in
 * the delayed set): both steps once.
 *
 * Severity: high (a step's effects twice after a worker crash, the case the library exists
 * for; the window is one Redis round trip, widened by any Redis latency).
 *
 * Fixed: the step's held data commits with the step, on its key (`bullmq:step-data`,
 * RELEASE_JOB_STEP v3), and the job's own next run gives it back to BullMQ before it runs
 * (`dataToRestore`).
 */
import { type ChildProcess, spawn } from 'node:child_process';
import { Queue } from 'bullmq';
import { Client } from 'pg';
import { DataSource } from 'typeorm';
import { IDEMPOTENCY_MIGRATIONS } from '../../../lib/index.js';
import { until } from '../../support/brokers.js';
import { createTestDatabase, type TestDatabase } from '../../support/database.js';
import { settled } from '../../support/adv55-fixture.js';
import { onRedis } from '../../support/job-queues.js';
import { startTestRedis, type TestRedis } from '../../support/redis-server.js';
import { TcpProxy } from '../../support/tcp-proxy.js';
import { compiled } from '../../support/worker-process.js';

let database: TestDatabase;
let redis: TestRedis;
let admin: Client;
const children: ChildProcess[] = [];
const queues: Queue[] = [];

interface Worker {
  child: ChildProcess;
  output(): string;
  kill(): Promise<void>;
}

async function startWorker(env: Record<string, string>): Promise<Worker> {
  const child = spawn(process.execPath, [compiled('test/support/adv57-worker.js')], {
    env: {
      ...process.env,
      NODE_OPTIONS: '',
      DATABASE_URL: database.url,
      REDIS_PORT: String(redis.port),
      LOCK_MS: '2000',
      STALLED_MS: '1000',
      ...env,
    },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  children.push(child);
  let output = '';
  child.stdout!.on('data', (chunk: Buffer) => (output += chunk.toString()));
  child.stderr!.on('data', (chunk: Buffer) => (output += chunk.toString()));
  await until(
    () => Promise.resolve(output.includes('ready') || child.exitCode !== null),
    'the worker to start',
    60_000,
  );
  if (child.exitCode !== null) throw new Error(`the worker exited:\n${output}`);
  return {
    child,
    output: () => output,
    kill: () =>
      new Promise<void>((resolve) => {
        if (child.exitCode !== null || child.signalCode !== null) return resolve();
        child.once('exit', () => resolve());
        child.kill('SIGKILL');
      }),
  };
}

async function steps(orderId: string): Promise<string[]> {
  const { rows } = await admin.query<{ step: string }>(
    'SELECT step FROM steps WHERE order_id = $1 ORDER BY id',
    [orderId],
  );
  return rows.map((row) => row.step);
}

/** Whether the job's step one committed (its key names the job its step owner). */
async function stepCommitted(queueName: string): Promise<boolean> {
  const { rows } = await admin.query(
    `SELECT 1 FROM idempotency_keys WHERE tenant_id = $1 AND phase_results ? 'bullmq:step'`,
    [`bullmq:${queueName}`],
  );
  return rows.length > 0;
}

onRedis('adversary 57: a worker killed between a step commit and its data', () => {
  beforeAll(async () => {
    [database, redis] = await Promise.all([
      createTestDatabase('adv57_step_crash'),
      startTestRedis(),
    ]);
    const migrations = new DataSource({
      type: 'postgres',
      url: database.url,
      migrations: [...IDEMPOTENCY_MIGRATIONS],
    });
    await migrations.initialize();
    await migrations.runMigrations();
    await migrations.destroy();
    admin = new Client({ connectionString: database.url });
    await admin.connect();
    await admin.query(
      'CREATE TABLE steps (id serial PRIMARY KEY, order_id text NOT NULL, step text NOT NULL)',
    );
  }, 60_000);

  afterEach(async () => {
    await Promise.all(
      children.splice(0).map(
        (child) =>
          new Promise<void>((resolve) => {
            if (child.exitCode !== null || child.signalCode !== null) return resolve();
            child.once('exit', () => resolve());
            child.kill('SIGKILL');
          }),
      ),
    );
    await Promise.all(queues.splice(0).map((queue) => queue.close()));
  });

  afterAll(async () => {
    await admin?.end();
    await redis?.stop();
    await database?.drop();
  });

  it('control: killed once the job moved itself (its data in BullMQ), both steps once', async () => {
    const queueName = 'after-move';
    const first = await startWorker({ QUEUE: queueName, STEP_DELAY_MS: '2000' });
    const queue = new Queue(queueName, { connection: { port: redis.port } });
    queues.push(queue);
    const job = await queue.add('order', { orderId: queueName });
    await until(async () => (await queue.getJobState(job.id!)) === 'delayed', 'the job delayed');
    await first.kill();
    await startWorker({ QUEUE: queueName });
    const end = await settled(queue, job.id!, 30_000);
    expect({ state: end.state, steps: await steps(queueName) }).toEqual({
      state: 'completed',
      steps: ['first', 'second'],
    });
  }, 60_000);

  it('killed after its step committed, before its data reached BullMQ: step one once', async () => {
    const queueName = 'before-data';
    // The first worker reaches Redis through a proxy the test can cut.
    const proxy = new TcpProxy('127.0.0.1', redis.port);
    await proxy.start();
    const first = await startWorker({
      QUEUE: queueName,
      HOLD_MS: '1500',
      REDIS_PORT: String(proxy.port),
    });
    const queue = new Queue(queueName, { connection: { port: redis.port } });
    queues.push(queue);
    const job = await queue.add('order', { orderId: queueName });
    await until(() => Promise.resolve(first.output().includes('holding')), 'step one to hold');
    // Its path to Redis hangs: the step commits in PostgreSQL, its data waits on its way to
    // Redis, and the worker dies meanwhile.
    proxy.blackhole();
    await until(() => stepCommitted(queueName), 'step one to commit', 10_000);
    await first.kill();
    await proxy.stop();
    await startWorker({ QUEUE: queueName });
    const end = await settled(queue, job.id!, 30_000);
    expect({ state: end.state, steps: await steps(queueName) }).toEqual({
      state: 'completed',
      steps: ['first', 'second'],
    });
  }, 60_000);
});
