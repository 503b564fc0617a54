/**
 * What the app does: a request-scoped BullMQ consumer, as NestJS documents it (techniques/
 * queues, "Request-scoped consumers"): its processor injects the job it runs
 * (`@Inject(JOB_REF)`, from `@nestjs/bullmq`), which makes it request-scoped; `@nestjs/bullmq`
 * then builds an instance of it per job. Its `process` is `@IdempotentJob()`, with
 * `IdempotencyModule` imported in the app module, as docs/guides/jobs.md says.
 *
 * What happens: the job waits ten seconds and fails for good (`UnrecoverableError`), its
 * reason "no IdempotencyModule runs it. Import IdempotencyModule ... in the app module", which
 * the app does. The library binds the instances it finds at start-up
 * (lib/jobs/idempotent-jobs.service.ts:89-98, `wrapper.instance`), and looks the running one
 * up by identity (lib/jobs/job-registry.ts:28-29); the per-job instance `@nestjs/bullmq`
 * builds (bull.explorer.js:123, `injector.loadPerContext`) is never bound. The job never runs;
 * the processor without the decorator runs it; the reason given is wrong.
 *
 * Expected (docs/guides/jobs.md): "Put it on the processor's method (`@nestjs/bullmq`'s
 * `WorkerHost.process` ...), with `IdempotencyModule` imported in the app": the job runs
 * once and completes; or a refusal at start-up that says a request-scoped processor is not
 * supported, not a job lost with a reason that names the wrong cause.
 *
 * Control: the same processor without `@IdempotentJob()` (request-scoped, completes), and
 * the decorated one without `JOB_REF` (a singleton: completes, its row written once).
 *
 * Severity: medium (every job of the processor fails for good after 10 s, never run, with a
 * reason that names the wrong cause; nothing runs twice).
 */
import 'reflect-metadata';
import { Inject, Module, type INestApplicationContext } from '@nestjs/common';
import { NestFactory } from '@nestjs/core';
import { BullModule, JOB_REF, Processor, WorkerHost } from '@nestjs/bullmq';
import { type Job, Queue, QueueEvents } from 'bullmq';
import { Pool } from 'pg';
import { IdempotencyModule, IdempotentJob } from '../../../lib/index.js';
import { createMigratedDatabase, type MigratedDatabase } from '../../support/migrated-database.js';
import {
  redisServerInstalled,
  startTestRedis,
  type TestRedis,
} from '../../support/redis-server.js';

const onRedis = redisServerInstalled() || process.env.CI === 'true' ? describe : describe.skip;

interface Payout {
  orderId: string;
  cents: number;
}

let redis: TestRedis;
let database: MigratedDatabase;
let pool: Pool;

async function pay(job: Job<Payout>): Promise<unknown> {
  await pool.query('INSERT INTO payouts (order_id, cents) VALUES ($1, $2)', [
    job.data.orderId,
    job.data.cents,
  ]);
  return { paid: job.data.cents };
}

type Kind = 'scoped-plain' | 'scoped-decorated' | 'singleton-decorated';

async function startApp(queue: string, kind: Kind): Promise<INestApplicationContext> {
  @Processor(queue)
  class ScopedPlain extends WorkerHost {
    constructor(@Inject(JOB_REF) private readonly jobRef: Job<Payout>) {
      super();
    }
    process() {
      return pay(this.jobRef);
    }
  }
  @Processor(queue)
  class ScopedDecorated extends WorkerHost {
    constructor(@Inject(JOB_REF) private readonly jobRef: Job<Payout>) {
      super();
    }
    @IdempotentJob()
    process(job: Job<Payout>) {
      expect(job.id).toBe(this.jobRef.id);
      return pay(job);
    }
  }
  @Processor(queue)
  class SingletonDecorated extends WorkerHost {
    @IdempotentJob()
    process(job: Job<Payout>) {
      return pay(job);
    }
  }
  const processor = { 'scoped-plain': ScopedPlain, 'scoped-decorated': ScopedDecorated }[
    kind as 'scoped-plain'
  ];
  @Module({
    imports: [
      IdempotencyModule.forRoot({ globalKeys: true, pool }),
      BullModule.forRoot({ connection: { host: '127.0.0.1', port: redis.port } }),
      BullModule.registerQueue({ name: queue }),
    ],
    providers: [processor ?? SingletonDecorated],
  })
  class AppModule {}
  return NestFactory.createApplicationContext(AppModule, { logger: ['error'] });
}

async function runJob(queueName: string, kind: Kind) {
  const app = await startApp(queueName, kind);
  const queue = new Queue(queueName, { connection: { port: redis.port } });
  const events = new QueueEvents(queueName, { connection: { port: redis.port } });
  try {
    await events.waitUntilReady();
    const job = await queue.add('payout', { orderId: queueName, cents: 500 });
    const outcome = await job.waitUntilFinished(events, 30_000).then(
      (value: unknown) => ({ completed: value }),
      (error: Error) => ({ failed: error.message }),
    );
    const { rows } = await pool.query<{ n: number }>(
      'SELECT count(*)::int AS n FROM payouts WHERE order_id = $1',
      [queueName],
    );
    return { outcome, rows: rows[0]!.n };
  } finally {
    await events.close();
    await queue.close();
    await app.close();
  }
}

onRedis('adversary 54: a request-scoped processor (JOB_REF)', () => {
  beforeAll(async () => {
    redis = await startTestRedis();
    database = await createMigratedDatabase('adv54_request_scoped');
    pool = new Pool({ connectionString: database.url, max: 4 });
    await pool.query('CREATE TABLE payouts (order_id text NOT NULL, cents int NOT NULL)');
  }, 60_000);

  afterAll(async () => {
    await pool?.end();
    await database?.drop();
    await redis?.stop();
  });

  it('control: without the library the request-scoped processor pays', async () => {
    expect(await runJob('scoped-plain', 'scoped-plain')).toEqual({
      outcome: { completed: { paid: 500 } },
      rows: 1,
    });
  }, 60_000);

  it('control: a singleton processor with @IdempotentJob() pays once', async () => {
    expect(await runJob('singleton-decorated', 'singleton-decorated')).toEqual({
      outcome: { completed: { paid: 500 } },
      rows: 1,
    });
  }, 60_000);

  it('with @IdempotentJob(), the request-scoped processor pays once', async () => {
    // Fails after 10 s: { outcome: { failed: '... no IdempotencyModule runs it ...' }, rows: 0 }.
    expect(await runJob('scoped-decorated', 'scoped-decorated')).toEqual({
      outcome: { completed: { paid: 500 } },
      rows: 1,
    });
  }, 60_000);
});
