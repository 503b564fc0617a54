/**
 * Adversary 74: a processor that Nest makes with a factory (`useFactory`, as for one configured
 * per environment) or gives as a value (`useValue`), both of which `@nestjs/bullmq` runs as
 * processors, is never bound to the library: its `@IdempotentJob()` method waits 10 s for a
 * runner, then fails EVERY job for good, saying "no IdempotencyModule runs it. Import
 * IdempotencyModule", in an app that imports it.
 *
 * The app: `IdempotencyModule.forRoot({ globalKeys: true, pool })`, BullMQ's module, and a
 * `WorkerHost` processor whose `process` is `@IdempotentJob()` (jobs.md's payouts processor on
 * the pool seam), provided as `{ provide: Payouts, useFactory: (limit) => new Payouts(limit),
 * inject: [PAYOUT_LIMIT] }` (its limit from the app's config). `@nestjs/bullmq`'s explorer
 * finds it (its `registerWorkers`: "we should use `wrapper.instance.constructor` instead of
 * `wrapper.metatype` ... to properly support `useValue` and `useFactory` providers") and its
 * worker runs its jobs.
 *
 * Why: lib/jobs/idempotent-jobs.service.ts `onModuleInit` reads each provider's
 * `wrapper.metatype`: for a factory provider that is the factory function, for a value provider
 * null, so `hasJobs` finds no `@IdempotentJob()` method and neither `bindJobs` nor
 * `bindJobClass` is called; lib/jobs/idempotent-job.decorator.ts then finds no runner
 * (`runnerOf`, 10 s) and throws `UnrecoverableError(IdempotentJobUnboundError)`.
 *
 * Expected (docs/guides/jobs.md): "Put it on the processor's method (`@nestjs/bullmq`'s
 * `WorkerHost.process` ...), with `IdempotencyModule` imported in the app" — the job runs once
 * and completes with its result; the library's refusal (IdempotentJobUnboundError) is for "a
 * processor whose module does not import `IdempotencyModule`" (lib/jobs/job-errors.ts).
 *
 * Control: the same processor provided as its class (`providers: [Payouts]`): completed.
 *
 * Severity: medium (every job of such a processor failed for ever, its reason false; nothing is
 * paid twice, nothing at all is paid).
 *
 * Fails now: factory and value: { state: 'failed', reason: '... no IdempotencyModule runs it.
 * Import IdempotencyModule ...' }, no row (after 10 s); control passes.
 *
 * Suggested fix: tell a provider's class as `@nestjs/bullmq` does (`!wrapper.metatype ||
 * wrapper.inject ? wrapper.instance?.constructor : wrapper.metatype`), and bind its instance.
 *
 * Fixed: `IdempotentJobs.onModuleInit` tells a provider's class as `@nestjs/bullmq` does
 * (`providerClassOf`: the instance's constructor for a factory or value provider) and binds its
 * instance. Scheduled tasks (lib/tasks/idempotent-tasks.service.ts) read `wrapper.instance`
 * already: not affected.
 */
import 'reflect-metadata';
import { Inject, Module, type INestApplicationContext } from '@nestjs/common';
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

const PAYOUT_LIMIT = 'PAYOUT_LIMIT';

interface Payout {
  orderId: string;
  cents: number;
}

type Provided = 'class' | 'factory' | 'value';

async function startApp(queue: string, provided: Provided): Promise<INestApplicationContext> {
  @Processor(queue)
  class Payouts extends WorkerHost {
    constructor(@Inject(PAYOUT_LIMIT) private readonly limit: number) {
      super();
    }

    @IdempotentJob()
    async process(job: Job<Payout>) {
      const cents = Math.min(job.data.cents, this.limit);
      await pool.query('INSERT INTO payouts (order_id, cents) VALUES ($1, $2)', [
        job.data.orderId,
        cents,
      ]);
      return { paid: cents };
    }
  }
  const processor =
    provided === 'class'
      ? Payouts
      : provided === 'factory'
        ? {
            provide: Payouts,
            useFactory: (limit: number) => new Payouts(limit),
            inject: [PAYOUT_LIMIT],
          }
        : { provide: Payouts, useValue: new Payouts(10_000) };
  @Module({
    imports: [
      IdempotencyModule.forRoot({ globalKeys: true, pool }),
      BullModule.forRoot({ connection: { host: '127.0.0.1', port: redis.port } }),
      BullModule.registerQueue({ name: queue }),
    ],
    providers: [{ provide: PAYOUT_LIMIT, useValue: 10_000 }, processor],
  })
  class AppModule {}
  return NestFactory.createApplicationContext(AppModule, { logger: [] });
}

async function payout(queueName: string, orderId: string, provided: Provided) {
  const app = await startApp(queueName, provided);
  const connection = { host: '127.0.0.1', port: redis.port };
  const queue = new Queue(queueName, { connection });
  const events = new QueueEvents(queueName, { connection });
  try {
    await events.waitUntilReady();
    const job = await queue.add('payout', { orderId, cents: 500 });
    const settled = await job.waitUntilFinished(events, 30_000).then(
      (value: unknown) => ({ state: 'completed', value }),
      (error: Error) => ({ state: 'failed', reason: error.message }),
    );
    const { rows } = await pool.query('SELECT 1 FROM payouts WHERE order_id = $1', [orderId]);
    return { settled, rows: rows.length };
  } finally {
    await events.close();
    await queue.obliterate({ force: true }).catch(() => undefined);
    await queue.close();
    await app.close();
  }
}

onRedis('adversary 74: a processor made by a factory or given as a value', () => {
  beforeAll(async () => {
    redis = await startTestRedis();
    database = await createMigratedDatabase('adv74_factory_provider');
    pool = new Pool({ connectionString: database.url, max: 4 });
    await pool.query('CREATE TABLE payouts (order_id text NOT NULL, cents int NOT NULL)');
  }, 60_000);

  afterAll(async () => {
    await pool?.end();
    await database?.drop();
    await redis?.stop();
  });

  it('control: provided as its class: the job runs once and completes', async () => {
    const result = await payout('provided-class', 'o-1', 'class');
    expect(result).toEqual({ settled: { state: 'completed', value: { paid: 500 } }, rows: 1 });
  }, 60_000);

  it('provided by a factory: the job runs once and completes', async () => {
    const result = await payout('provided-factory', 'o-2', 'factory');
    expect(result).toEqual({ settled: { state: 'completed', value: { paid: 500 } }, rows: 1 });
  }, 60_000);

  it('provided as a value: the job runs once and completes', async () => {
    const result = await payout('provided-value', 'o-3', 'value');
    expect(result).toEqual({ settled: { state: 'completed', value: { paid: 500 } }, rows: 1 });
  }, 60_000);
});
