import { Queue, QueueEvents } from 'bullmq';
import { Client } from 'pg';
import { DataSource } from 'typeorm';
import { IDEMPOTENCY_MIGRATIONS } from '../../lib/index.js';
import { until } from './brokers.js';
import { createTestDatabase, type TestDatabase } from './database.js';
import { startTestRedis, type TestRedis } from './redis-server.js';
import { type ReadyProcess, startReadyProcess } from './ready-process.js';

/** A worker process of test/support/adv55-worker.ts (or another compiled script). */
export type Adv55Worker = ReadyProcess;

export interface Adv55 {
  admin(): Client;
  startWorker(env: Record<string, string>, script?: string): Promise<Adv55Worker>;
  queueOf(name: string): { queue: Queue; events: QueueEvents };
  /** The `steps` rows of an order: their step names, in order. */
  steps(orderId: string): Promise<string[]>;
}

/**
 * A Redis and a PostgreSQL of the file's own: the library's migrations, an `accounts` table
 * (account `a1`) and a `steps` table whose account is a foreign key checked at COMMIT
 * (DEFERRABLE INITIALLY DEFERRED).
 */
export function useAdv55(label: string): Adv55 {
  let database: TestDatabase;
  let redis: TestRedis;
  let admin: Client;
  const workers: Adv55Worker[] = [];
  const queues: Queue[] = [];
  const listeners: QueueEvents[] = [];

  beforeAll(async () => {
    [database, redis] = await Promise.all([createTestDatabase(label), startTestRedis()]);
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
    await admin.query(`CREATE TABLE accounts (id text PRIMARY KEY)`);
    await admin.query(`INSERT INTO accounts VALUES ('a1')`);
    await admin.query(
      `CREATE TABLE steps (id serial PRIMARY KEY, order_id text NOT NULL, step text NOT NULL,
         account text REFERENCES accounts (id) DEFERRABLE INITIALLY DEFERRED)`,
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

  return {
    admin: () => admin,
    async startWorker(env, script = 'test/support/adv55-worker.js') {
      const worker = await startReadyProcess(
        script,
        { DATABASE_URL: database.url, REDIS_PORT: String(redis.port), ...env },
        'the worker to start',
      );
      workers.push(worker);
      return worker;
    },
    queueOf(name) {
      const connection = { host: '127.0.0.1', port: redis.port };
      const queue = new Queue(name, { connection });
      const events = new QueueEvents(name, { connection });
      queues.push(queue);
      listeners.push(events);
      return { queue, events };
    },
    async steps(orderId) {
      const { rows } = await admin.query<{ step: string }>(
        'SELECT step FROM steps WHERE order_id = $1 ORDER BY id',
        [orderId],
      );
      return rows.map((row) => row.step);
    },
  };
}

/** Waits for a job to end: its state and what BullMQ kept of it. */
export async function settled(
  queue: Queue,
  id: string,
  timeoutMs = 20_000,
): Promise<{ state: string; returnvalue: unknown; failedReason?: string; attemptsMade: number }> {
  let state = 'unknown';
  await until(
    async () => {
      state = await queue.getJobState(id);
      return state === 'completed' || state === 'failed';
    },
    () => `job ${id} to end (last state ${state})`,
    timeoutMs,
  );
  const job = (await queue.getJob(id))!;
  return {
    state,
    returnvalue: job.returnvalue,
    failedReason: job.failedReason,
    attemptsMade: job.attemptsMade,
  };
}
