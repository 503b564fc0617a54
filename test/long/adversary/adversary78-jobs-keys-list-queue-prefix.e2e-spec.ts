/**
 * Adversary 78: `keys list --tenant bullmq:payouts`, which the jobs guide gives as "one
 * queue's" keys, also lists the keys of every other queue whose name begins with `payouts`
 * (`payouts-eu`, `payouts-dlq`, `payouts2`), and those of any queue under a BullMQ prefix named
 * `payouts` (`bullmq:payouts:<queue>`).
 *
 * The user code: two `@IdempotentJob()` processors, on queues `payouts` and `payouts-eu` (a
 * region's queue, a dead-letter queue: the usual names), each with a job at work. The operator
 * looks at the `payouts` queue's keys as the guide shows: `keys list --tenant bullmq:payouts`.
 *
 * Why it breaks: lib/cli/database.ts `listUnfinishedKeys` filters with
 * `starts_with(tenant_id, $2)`: `--tenant` is a prefix of the tenant (the CLI's usage says so,
 * "only tenants that begin so"), and a queue's tenant (`bullmq:<queue>`, lib/jobs/job-key.ts
 * `jobTenant`) is the prefix of every longer queue name's. So the list of "one queue" holds
 * the other queue's keys too, and its count ("N unfinished: … stuck") is theirs too: an
 * operator about to `keys release` the `payouts` queue's stuck keys reads the other queue's as
 * its own.
 *
 * The docs it contradicts: docs/guides/jobs.md, "Operations": "`keys list` (`--tenant
 * bullmq:payouts`, one queue's) shows a job still at work (or stuck, or given back) under its
 * queue's tenant"; docs/reference/cli.md: "a BullMQ queue's jobs with `bullmq:payouts`".
 *
 * Severity: low (an operator's view, not the jobs' effects; the TENANT column names each key's
 * queue for whoever reads it, but the summary count and a script filtering by it do not).
 *
 * Fails now: `keys list --tenant bullmq:payouts` prints the key of the `payouts-eu` job
 * (tenant `bullmq:payouts-eu`) and counts 2 unfinished, not 1.
 *
 * Control: `--tenant bullmq:payouts-eu` (no queue's name extends it) lists that queue's key
 * alone.
 *
 * Suggested fix: `--tenant` matches a tenant whole, or as a prefix only where it ends at a
 * boundary of the library's tenants (`bullmq:`, `schedule:`, or a given `…:`), e.g. exact match
 * OR `starts_with(tenant_id, $2 || ':')` for a queue's tenant (its prefixed form
 * `bullmq:<prefix>:<queue>` is another queue and would need its own word); or the guide and
 * the CLI's docs say it is a prefix, and show `--tenant bullmq:payouts` as "queues whose names
 * begin so".
 *
 * Fixed: `--tenant T` lists the tenant `T` alone, and the tenants that begin with it only where
 * it ends at `:` (`bullmq:`, `schedule:`, `bullmq:<prefix>:`): lib/cli/tenant-filter.ts
 * `tenantFilter` (a pure decision), lib/cli/database.ts `listUnfinishedKeys`; the CLI's usage
 * (lib/cli/args.ts) and docs/reference/cli.md say so.
 */
import 'reflect-metadata';
import { Module, type INestApplicationContext } from '@nestjs/common';
import { NestFactory } from '@nestjs/core';
import { BullModule, Processor, WorkerHost } from '@nestjs/bullmq';
import { type Job, Queue } from 'bullmq';
import { Pool } from 'pg';
import { IdempotencyModule, IdempotentJob } from '../../../lib/index.js';
import { runCli } from '../../support/cli-process.js';
import { onRedis } from '../../support/job-queues.js';
import { createMigratedDatabase, type MigratedDatabase } from '../../support/migrated-database.js';
import { startTestRedis, type TestRedis } from '../../support/redis-server.js';

let redis: TestRedis;
let database: MigratedDatabase;
let pool: Pool;
let app: INestApplicationContext;
const queues: Queue[] = [];
let openGate: () => void = () => undefined;
const gate = new Promise<void>((resolve) => (openGate = resolve));
const started = new Set<string>();

async function payout(job: Job<{ orderId: string }>) {
  await pool.query('INSERT INTO payouts (order_id) VALUES ($1)', [job.data.orderId]);
  started.add(job.queueName);
  // At work while the operator looks.
  await gate;
  return { paid: job.data.orderId };
}

@Processor('payouts')
class Payouts extends WorkerHost {
  @IdempotentJob()
  process(job: Job<{ orderId: string }>) {
    return payout(job);
  }
}

@Processor('payouts-eu')
class EuPayouts extends WorkerHost {
  @IdempotentJob()
  process(job: Job<{ orderId: string }>) {
    return payout(job);
  }
}

async function waitFor(check: () => boolean, ms: number): Promise<void> {
  const until = Date.now() + ms;
  while (!check()) {
    if (Date.now() > until) throw new Error('the jobs did not start');
    await new Promise((resolve) => setTimeout(resolve, 100));
  }
}

onRedis('adversary 78: keys list --tenant bullmq:<queue>, one queue', () => {
  beforeAll(async () => {
    redis = await startTestRedis();
    database = await createMigratedDatabase('adv78_keys_list_queue');
    pool = new Pool({ connectionString: database.url, max: 6 });
    await pool.query('CREATE TABLE payouts (id serial PRIMARY KEY, order_id text NOT NULL)');
    const connection = { host: '127.0.0.1', port: redis.port };
    @Module({
      imports: [
        IdempotencyModule.forRoot({ globalKeys: true, pool }),
        BullModule.forRoot({ connection }),
        BullModule.registerQueue({ name: 'payouts' }, { name: 'payouts-eu' }),
      ],
      providers: [Payouts, EuPayouts],
    })
    class AppModule {}
    app = await NestFactory.createApplicationContext(AppModule, { logger: [] });
    for (const name of ['payouts', 'payouts-eu']) {
      const queue = new Queue(name, { connection });
      queues.push(queue);
      await queue.add('payout', { orderId: `${name}-1` }, { jobId: `${name}-order-1` });
    }
    await waitFor(() => started.size === 2, 30_000);
  }, 90_000);

  afterAll(async () => {
    openGate();
    await new Promise((resolve) => setTimeout(resolve, 500));
    await Promise.all(queues.map((queue) => queue.close()));
    await app?.close();
    await pool?.end();
    await database?.drop();
    await redis?.stop();
  });

  it('control: --tenant bullmq:payouts-eu lists that queue’s job alone', async () => {
    const run = await runCli([
      'keys',
      'list',
      '--url',
      database.url,
      '--tenant',
      'bullmq:payouts-eu',
    ]);
    expect(run.stdout).toContain('payouts-eu-order-1');
    expect(run.stdout).not.toContain(' payouts-order-1');
    expect(run.stdout).toContain('1 unfinished');
  }, 60_000);

  // Fixed (round 78 fixer)
  it('--tenant bullmq:payouts lists the payouts queue’s job alone, as the guide says', async () => {
    const run = await runCli(['keys', 'list', '--url', database.url, '--tenant', 'bullmq:payouts']);
    expect(run.stdout).toContain('payouts-order-1');
    // Fails: the payouts-eu queue's job is listed too (tenant bullmq:payouts-eu), and counted:
    // "2 unfinished: 2 in flight".
    expect(run.stdout).not.toContain('payouts-eu-order-1');
    expect(run.stdout).toContain('1 unfinished');
  }, 60_000);
});
