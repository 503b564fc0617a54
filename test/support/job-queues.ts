import { type Job, Queue, QueueEvents } from 'bullmq';
import { Client } from 'pg';
import { DataSource } from 'typeorm';
import { IDEMPOTENCY_MIGRATIONS } from '../../lib/index.js';
import { createTestDatabase, type TestDatabase } from './database.js';
import { redisServerInstalled, startTestRedis, type TestRedis } from './redis-server.js';
import { type ReadyProcess, startReadyProcess } from './ready-process.js';

/** Where redis-server is not installed, outside CI, the job tests skip. */
export const onRedis =
  redisServerInstalled() || process.env.CI === 'true' ? describe : describe.skip;

/** A worker process of test/support/job-worker.ts. */
export type JobWorker = ReadyProcess;

/** What a job test works with: its workers, its queues, the payouts they made. */
export interface JobQueues {
  /** Starts a worker process with `env` (see job-worker.ts); resolves once it runs. */
  startWorker(env: Record<string, string>): Promise<JobWorker>;
  /**
   * A queue and its events' listener, closed after the test; once the listener reads events (a
   * job that finishes before it does is never heard of: a fast control on a loaded machine).
   */
  queueOf(name: string): Promise<{ queue: Queue; events: QueueEvents }>;
  /** The payouts of an order, by the worker that made each, in order. */
  payouts(orderId: string): Promise<{ worker: string }[]>;
  /**
   * The job's result, as `waitUntilFinished` gives it (30 s at most); where no finish is heard
   * in time, an error that says the job's state then and what the workers printed, so that a
   * timeout seen once in CI says where the job was.
   */
  finished(job: Job, events: QueueEvents): Promise<unknown>;
}

/**
 * A Redis and a PostgreSQL of the test file's own (the library's migrations run, and a
 * `payouts` table), its workers killed and its queues closed after each test.
 */
export function useJobQueues(label: string): JobQueues {
  let database: TestDatabase;
  let redis: TestRedis;
  let admin: Client;
  const workers: JobWorker[] = [];
  const queues: Queue[] = [];
  const listeners: QueueEvents[] = [];

  beforeAll(async () => {
    [database, redis] = await Promise.all([createTestDatabase(label), startTestRedis()]);
    // Migrated here: a worker on the pool seam runs no migrations of its own.
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
      `CREATE TABLE payouts (id serial PRIMARY KEY, order_id text NOT NULL, cents int NOT NULL,
         worker text NOT NULL)`,
    );
  }, 60_000);

  afterEach(async () => {
    // A worker that exited on its own during the test says why (a timeout then makes sense).
    for (const worker of workers) {
      const { exitCode, signalCode } = worker.child;
      if (!worker.killed?.() && (exitCode !== null || signalCode !== null)) {
        console.error(`a job worker exited (${exitCode ?? signalCode}):\n${worker.output()}`);
      }
    }
    await Promise.all(workers.splice(0).map((worker) => worker.kill()));
    await Promise.all(listeners.splice(0).map((events) => events.close()));
    await Promise.all(queues.splice(0).map((queue) => queue.close()));
  });

  afterAll(async () => {
    await admin?.end();
    await redis?.stop();
    await database?.drop();
  });

  return {
    async startWorker(env) {
      const worker = await startReadyProcess(
        'test/support/job-worker.js',
        { DATABASE_URL: database.url, REDIS_PORT: String(redis.port), ...env },
        'the job worker to start',
      );
      workers.push(worker);
      return worker;
    },
    async queueOf(name) {
      const connection = { host: '127.0.0.1', port: redis.port };
      const queue = new Queue(name, { connection });
      // From the stream's start: `waitUntilReady()` waits for the connection, not for the first
      // read of the events stream, and a job a fast worker finished in between was never
      // announced (seen: "no finish notification ... its state then: completed"). Each queue
      // is new, so its stream holds only this test's events.
      const events = new QueueEvents(name, { connection, lastEventId: '0-0' });
      queues.push(queue);
      listeners.push(events);
      await Promise.all([queue.waitUntilReady(), events.waitUntilReady()]);
      return { queue, events };
    },
    async finished(job, events) {
      try {
        return (await job.waitUntilFinished(events, 30_000)) as unknown;
      } catch (error) {
        if (!/timed out before finishing/.test(String(error))) throw error;
        const state = await job.getState().catch((failed: unknown) => String(failed));
        const printed = workers.map((worker) => worker.output()).join('\n---\n');
        throw new Error(
          `${String(error)}; its state then: ${state}; the workers printed:\n${printed}`,
        );
      }
    },
    async payouts(orderId) {
      const { rows } = await admin.query<{ worker: string }>(
        'SELECT worker FROM payouts WHERE order_id = $1 ORDER BY id',
        [orderId],
      );
      return rows;
    },
  };
}
