/**
 * Fixed (session of 2026-12-06 fifth): the namespace no longer replaces what the library
 * reads; it names the service around it (lib/jobs/job-key.ts `jobTenant(queue, prefix, place,
 * namespace)`: `bullmq:<namespace>:<body>:ns:`, `<body>` the tenant without a namespace, so
 * `bullmq:billing:invoices-ns:db2::ns:` and `...:db3::ns:` here; on database 0 the tenant is
 * as before, `bullmq:<namespace>:<queue>:ns:`). lib/jobs/idempotent-jobs.service.ts `runOnce`
 * always reads the worker's place (`jobStore`) and refuses an unreadable one only without a
 * namespace (then namespace and queue are the tenant). Table-driven spec: lib/jobs/
 * job-key.spec.ts ("no two forms meet"). docs/guides/jobs.md says so.
 *
 * Adversary 94: `@IdempotentJob({ namespace })` replaces the Redis database in the job key's
 * tenant (`bullmq:<namespace>:<queue>:ns:`), so one service that gives "one namespace per
 * service", as the docs ask, and runs one queue name on two Redis databases (a queue per
 * region, per shard: two BullMQ configurations, `configKey`) keeps both queues' keys under ONE
 * tenant. Without the namespace they were apart (`bullmq:<queue>:db2:`, `bullmq:<queue>:db3:`,
 * adversary 90's fix); adding it, as the docs advise for two services on two Redis servers,
 * brings adversary 90's break back inside the service: the US job `invoice-7` is "completed"
 * with the EU job's result and never runs.
 *
 * User code: a billing service, its keys in one PostgreSQL database with another service's
 * (so it gives its namespace, one per service, as jobs.md says):
 *   BullModule.forRoot('eu', { connection: { host, port, db: 2 } }),
 *   BullModule.forRoot('us', { connection: { host, port, db: 3 } }),
 *   BullModule.registerQueue({ name: 'audit', configKey: 'eu' }),
 *   @Processor({ name: 'invoices', configKey: 'eu' }) class EuInvoices extends WorkerHost {
 *     @IdempotentJob({ namespace: 'billing' }) process(job) { ...INSERT the invoice... } }
 *   @Processor({ name: 'invoices', configKey: 'us' }) class UsInvoices ... (same namespace)
 * each region's producer adds `invoice-7` (its own job id) to its own queue.
 *
 * Code path: lib/jobs/idempotent-jobs.service.ts `runOnce`: `namespace === undefined ?
 * await jobStore(job) : { kind: 'namespace', namespace }`: the worker's database is no longer
 * read → lib/jobs/job-key.ts `jobTenant(queue, prefix, { kind: 'namespace' })` =
 * `bullmq:billing:invoices:ns:` for both workers → the US job's claim replays the EU record.
 *
 * Docs quote (docs/guides/jobs.md, "Its key"): "one queue name under two prefixes, on two
 * databases or in two schemas, is two queues, as BullMQ has them" ... "A `namespace` (1 to 100
 * characters, without `:`; one per service) replaces what the library reads: give one too
 * where two services' queues share a name on two Redis servers". Nothing says a namespace
 * makes one service's queues on two databases (or in two schemas) one.
 *
 * Severity: high (a job never run, told done with another queue's result, silently).
 *
 * Fails now (un-skipped): { eu: 'eu', us: 'eu', invoices: ['eu'] }, expected the US
 * invoice made too.
 *
 * Control: the same service without the namespace: both invoices made (tenants
 * `bullmq:invoices:db2:`, `bullmq:invoices:db3:`).
 *
 * Suggested fix: keep what the library reads under the namespace (`bullmq:<namespace>:
 * <queue>:db<n>:ns:`, `...:<schema>:pg:ns:` or so: the namespace tells servers and
 * PostgreSQL databases apart, the database and schema stay read), refusing only where the
 * place is unreadable and no namespace is given; or say in jobs.md that a namespace is one per
 * queue place (server and database), not per service.
 */
import 'reflect-metadata';
import { Module, type INestApplicationContext } from '@nestjs/common';
import { NestFactory } from '@nestjs/core';
import { BullModule, Processor, WorkerHost } from '@nestjs/bullmq';
import { type Job, Queue, QueueEvents } from 'bullmq';
import { Pool } from 'pg';
import { IdempotencyModule, IdempotentJob } from '../../../lib/index.js';
import { onRedis } from '../../support/job-queues.js';
import { createMigratedDatabase, type MigratedDatabase } from '../../support/migrated-database.js';
import { startTestRedis, type TestRedis } from '../../support/redis-server.js';

let redis: TestRedis;
let database: MigratedDatabase;
let pool: Pool;

interface Invoice {
  orderId: number;
}

const REGIONS = { eu: 2, us: 3 } as const;
type Region = keyof typeof REGIONS;

async function invoice(region: Region, job: Job<Invoice>) {
  const { rows } = await pool.query<{ id: number }>(
    'INSERT INTO invoices (region, order_id) VALUES ($1, $2) RETURNING id',
    [region, job.data.orderId],
  );
  return { region, invoice: rows[0].id };
}

const connectionOf = (region: Region) => ({
  host: '127.0.0.1',
  port: redis.port,
  db: REGIONS[region],
});

async function startBilling(queue: string, namespace?: string): Promise<INestApplicationContext> {
  const options = namespace === undefined ? {} : { namespace };
  @Processor({ name: queue, configKey: 'eu' })
  class EuInvoices extends WorkerHost {
    @IdempotentJob(options)
    process(job: Job<Invoice>) {
      return invoice('eu', job);
    }
  }
  @Processor({ name: queue, configKey: 'us' })
  class UsInvoices extends WorkerHost {
    @IdempotentJob(options)
    process(job: Job<Invoice>) {
      return invoice('us', job);
    }
  }
  @Module({
    imports: [
      IdempotencyModule.forRoot({ globalKeys: true, pool }),
      BullModule.forRoot('eu', { connection: connectionOf('eu') }),
      BullModule.forRoot('us', { connection: connectionOf('us') }),
      // The service's other queue (this also starts @nestjs/bullmq's worker explorer).
      BullModule.registerQueue({ name: `${queue}-audit`, configKey: 'eu' }),
    ],
    providers: [EuInvoices, UsInvoices],
  })
  class BillingModule {}
  return NestFactory.createApplicationContext(BillingModule, { logger: [] });
}

/** A region's producer adds `invoice-7` to its own queue and waits for its result. */
async function addInvoice(region: Region, queueName: string) {
  const connection = connectionOf(region);
  const queue = new Queue<Invoice>(queueName, { connection });
  const events = new QueueEvents(queueName, { connection });
  try {
    await events.waitUntilReady();
    const job = await queue.add('invoice', { orderId: 7 }, { jobId: 'invoice-7' });
    return (await job.waitUntilFinished(events, 15_000)) as { region: string };
  } finally {
    await events.close();
    await queue.close();
  }
}

async function bothRegions(run: string, namespace?: string) {
  await pool.query(`ALTER TABLE invoices ALTER COLUMN run SET DEFAULT '${run}'`);
  const queue = `invoices-${run}`;
  const billing = await startBilling(queue, namespace);
  try {
    const eu = await addInvoice('eu', queue);
    const us = await addInvoice('us', queue);
    const { rows } = await pool.query<{ region: string }>(
      'SELECT region FROM invoices WHERE run = $1 ORDER BY id',
      [run],
    );
    return { eu: eu.region, us: us.region, invoices: rows.map((row) => row.region) };
  } finally {
    await billing.close();
  }
}

const bothMade = { eu: 'eu', us: 'us', invoices: ['eu', 'us'] };

onRedis('adversary 94: a namespace makes one queue name on two Redis databases one', () => {
  beforeAll(async () => {
    redis = await startTestRedis();
    database = await createMigratedDatabase('adv94_namespace_redis_db');
    pool = new Pool({ connectionString: database.url, max: 6 });
    await pool.query(
      `CREATE TABLE invoices (id serial PRIMARY KEY, region text NOT NULL, order_id int NOT NULL,
         run text NOT NULL DEFAULT '')`,
    );
  }, 60_000);

  afterAll(async () => {
    await pool?.end();
    await database?.drop();
    await redis?.stop();
  });

  it('control: without a namespace, each region makes its invoice', async () => {
    expect(await bothRegions('plain')).toEqual(bothMade);
  }, 60_000);

  it("with the service's namespace, the US job runs, not the EU result", async () => {
    expect(await bothRegions('ns', 'billing')).toEqual(bothMade);
  }, 60_000);
});
