/**
 * `npm run bench:jobs`: BullMQ jobs per second on one queue, with `@IdempotentJob()` and
 * without it, on TypeORM and on the pool seam, as ratios in one run on one machine.
 *
 * Each variant is a worker process of test/support/job-worker.ts (a payout row per job, its
 * concurrency `BENCH_CONCURRENCY`, 8 by default) on a Redis and a PostgreSQL of the run's own;
 * each round adds `BENCH_JOBS` jobs (1000) at once and times them until BullMQ counts them all
 * completed. Variants run in interleaved rounds (`BENCH_ROUNDS`, 3), reported as medians.
 */
import { Queue } from 'bullmq';
import { Client } from 'pg';
import { DataSource } from 'typeorm';
import { IDEMPOTENCY_MIGRATIONS } from '../lib/index.js';
import { createTestDatabase } from '../test/support/database.js';
import { startReadyProcess } from '../test/support/ready-process.js';
import { startTestRedis } from '../test/support/redis-server.js';
import { startEmbeddedPostgres } from '../sample-app/database/embedded-postgres.js';

const JOBS = Number(process.env.BENCH_JOBS ?? 1000);
const ROUNDS = Number(process.env.BENCH_ROUNDS ?? 3);
const CONCURRENCY = Number(process.env.BENCH_CONCURRENCY ?? 8);

interface Variant {
  name: string;
  seam: 'typeorm' | 'pool';
  idempotent: boolean;
}

const VARIANTS: Variant[] = [
  { name: 'TypeORM, plain', seam: 'typeorm', idempotent: false },
  { name: 'TypeORM, @IdempotentJob()', seam: 'typeorm', idempotent: true },
  { name: 'pool seam, plain', seam: 'pool', idempotent: false },
  { name: 'pool seam, @IdempotentJob()', seam: 'pool', idempotent: true },
];

const median = (values: number[]) => [...values].sort((a, b) => a - b)[values.length >> 1];

async function main(): Promise<void> {
  // The machine's PostgreSQL where one is given (as `npm run bench`), else an embedded one.
  const given = process.env.TEST_DATABASE_URL ?? process.env.DATABASE_URL;
  const embedded = given ? undefined : await startEmbeddedPostgres();
  process.env.TEST_DATABASE_URL = given ?? embedded!.url;
  const [database, redis] = await Promise.all([createTestDatabase('bench_jobs'), startTestRedis()]);
  try {
    const migrations = new DataSource({
      type: 'postgres',
      url: database.url,
      migrations: [...IDEMPOTENCY_MIGRATIONS],
    });
    await migrations.initialize();
    await migrations.runMigrations();
    await migrations.destroy();
    const admin = new Client({ connectionString: database.url });
    await admin.connect();
    await admin.query(
      `CREATE TABLE payouts (id serial PRIMARY KEY, order_id text NOT NULL, cents int NOT NULL,
         worker text NOT NULL)`,
    );
    const samples = new Map<string, number[]>(VARIANTS.map((variant) => [variant.name, []]));
    for (let round = 0; round < ROUNDS; round++) {
      for (const variant of VARIANTS) {
        const name = `bench-${round}-${variant.seam}-${variant.idempotent ? 1 : 0}`;
        const worker = await startReadyProcess(
          'test/support/job-worker.js',
          {
            DATABASE_URL: database.url,
            REDIS_PORT: String(redis.port),
            QUEUE: name,
            WORKER: name,
            SEAM: variant.seam,
            IDEMPOTENT: variant.idempotent ? '1' : '0',
            CONCURRENCY: String(CONCURRENCY),
          },
          'the job worker to start',
        );
        const queue = new Queue(name, { connection: { host: '127.0.0.1', port: redis.port } });
        try {
          const jobs = Array.from({ length: JOBS }, (_, i) => ({
            name: 'payout',
            data: { orderId: `${name}-${i}`, cents: 100 },
          }));
          const began = performance.now();
          await queue.addBulk(jobs);
          while ((await queue.getJobCounts('completed')).completed < JOBS) {
            await new Promise((resolve) => setTimeout(resolve, 20));
          }
          const seconds = (performance.now() - began) / 1000;
          samples.get(variant.name)!.push(JOBS / seconds);
          const { rows } = await admin.query<{ n: number }>(
            'SELECT count(*)::int AS n FROM payouts WHERE worker = $1',
            [name],
          );
          if (rows[0].n !== JOBS) throw new Error(`${name}: ${rows[0].n} payouts for ${JOBS} jobs`);
        } finally {
          await queue.obliterate({ force: true }).catch(() => undefined);
          await queue.close();
          await worker.kill();
        }
      }
    }
    await admin.end();
    const out = [
      `BullMQ jobs per second, one queue, ${JOBS} jobs a round, concurrency ${CONCURRENCY}, ` +
        `median of ${ROUNDS} interleaved rounds`,
      '',
      '| variant | jobs/s | vs plain |',
      '| --- | ---: | ---: |',
    ];
    for (const variant of VARIANTS) {
      const rate = median(samples.get(variant.name)!);
      const plain = median(
        samples.get(VARIANTS.find((v) => v.seam === variant.seam && !v.idempotent)!.name)!,
      );
      out.push(`| ${variant.name} | ${rate.toFixed(0)} | ${(rate / plain).toFixed(2)} |`);
    }
    console.log(out.join('\n'));
  } finally {
    await redis.stop();
    await database.drop();
    await embedded?.stop();
  }
}

await main();
