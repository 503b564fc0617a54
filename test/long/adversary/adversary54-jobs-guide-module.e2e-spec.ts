/**
 * What the app does: a worker app written from docs/guides/jobs.md, its module the guide's
 * snippet (docs/snippets/jobs/app.module.ts): TypeORM, `IdempotencyModule.forRoot({})`,
 * `BullModule`, and the guide's `PayoutsProcessor` (`@IdempotentJob()` on `process`). It has
 * no HTTP routes: only jobs, whose keys are per queue.
 *
 * What happens: the app does not start. `forRoot({})` throws "IdempotencyModule: tenant is
 * required: keys are scoped per tenant ... Give tenant: (request) => the caller's account
 * ..." (lib/idempotency-options.ts:397-403): a rule of HTTP routes, met by a worker without
 * any, and a guide whose module cannot run as written. The snippet does not type-check either
 * (`npx tsc -p docs/snippets`: app.module.ts(18,31) TS2345, `{}` is not
 * `IdempotencyModuleOptions`), so test/docs-snippets.e2e-spec.ts fails on it too.
 *
 * Expected (docs/guides/jobs.md): the module as shown starts and runs the job (a job's key is
 * kept per queue, "`bullmq:<queue>` is their tenant"), or the snippet shows what it needs.
 *
 * Control: the same module with `forRoot({ globalKeys: true })` starts and pays the job once.
 *
 * Severity: low (the guide's app does not start; its error says what to add, in words of
 * requests).
 */
import 'reflect-metadata';
import { readFileSync } from 'node:fs';
import { Module } from '@nestjs/common';
import { NestFactory } from '@nestjs/core';
import { BullModule, Processor, WorkerHost } from '@nestjs/bullmq';
import { InjectRepository, TypeOrmModule } from '@nestjs/typeorm';
import { type Job, Queue, QueueEvents } from 'bullmq';
import { Column, Entity, PrimaryGeneratedColumn, type Repository } from 'typeorm';
import {
  IDEMPOTENCY_MIGRATIONS,
  IdempotencyModule,
  type IdempotencyModuleOptions,
  IdempotentJob,
} from '../../../lib/index.js';
import { createTestDatabase, type TestDatabase } from '../../support/database.js';
import {
  redisServerInstalled,
  startTestRedis,
  type TestRedis,
} from '../../support/redis-server.js';

const onRedis = redisServerInstalled() || process.env.CI === 'true' ? describe : describe.skip;

@Entity({ name: 'payout' })
class Payout {
  @PrimaryGeneratedColumn()
  id!: number;
  @Column()
  orderId!: string;
  @Column()
  cents!: number;
}

interface PayoutJob {
  orderId: string;
  cents: number;
}

@Processor('payouts')
class PayoutsProcessor extends WorkerHost {
  constructor(@InjectRepository(Payout) private readonly payouts: Repository<Payout>) {
    super();
  }

  @IdempotentJob()
  async process(job: Job<PayoutJob>) {
    const payout = await this.payouts.save({ orderId: job.data.orderId, cents: job.data.cents });
    return { payoutId: payout.id };
  }
}

let redis: TestRedis;
let database: TestDatabase;

function appModule(idempotency: Parameters<typeof IdempotencyModule.forRoot>[0]) {
  @Module({
    imports: [
      TypeOrmModule.forRoot({
        type: 'postgres',
        url: database.url,
        entities: [Payout],
        migrations: [...IDEMPOTENCY_MIGRATIONS],
        migrationsRun: true,
        synchronize: true,
      }),
      TypeOrmModule.forFeature([Payout]),
      IdempotencyModule.forRoot(idempotency),
      BullModule.forRoot({ connection: { host: '127.0.0.1', port: redis.port } }),
      BullModule.registerQueue({ name: 'payouts' }),
    ],
    providers: [PayoutsProcessor],
  })
  class AppModule {}
  return AppModule;
}

async function startsAndPays(idempotency: Parameters<typeof IdempotencyModule.forRoot>[0]) {
  let app;
  try {
    app = await NestFactory.createApplicationContext(appModule(idempotency), {
      logger: false,
      abortOnError: false,
    });
  } catch (error) {
    return { started: false, error: (error as Error).message };
  }
  const queue = new Queue('payouts', { connection: { port: redis.port } });
  const events = new QueueEvents('payouts', { connection: { port: redis.port } });
  try {
    await events.waitUntilReady();
    const job = await queue.add('payout', { orderId: 'o-1', cents: 900 });
    return { started: true, value: (await job.waitUntilFinished(events, 20_000)) as unknown };
  } finally {
    await events.close();
    await queue.obliterate({ force: true });
    await queue.close();
    await app.close();
  }
}

onRedis("adversary 54: the jobs guide's app module", () => {
  beforeAll(async () => {
    redis = await startTestRedis();
    database = await createTestDatabase('adv54_guide_module');
  }, 60_000);

  afterAll(async () => {
    await database?.drop();
    await redis?.stop();
  });

  it('control: with globalKeys: true the worker starts and pays', async () => {
    expect(await startsAndPays({ globalKeys: true })).toEqual({
      started: true,
      value: { payoutId: 1 },
    });
  }, 60_000);

  it("the guide's module, with the options its snippet gives, starts and pays", async () => {
    // Failed with the snippet's first `forRoot({})` ('tenant is required'): the snippet now
    // gives what a worker without HTTP routes needs (`globalKeys: true`), and docs-snippets
    // compiles it. Read from the snippet, so that the guide and this test cannot part.
    const snippet = readFileSync('docs/snippets/jobs/app.module.ts', 'utf8');
    const given = /IdempotencyModule\.forRoot\((\{[^)]*\})\)/.exec(snippet)?.[1];
    expect(given).toBeDefined();
    const options = new Function(`return (${given})`)() as IdempotencyModuleOptions;
    expect(await startsAndPays(options)).toEqual({
      started: true,
      value: { payoutId: expect.any(Number) as number },
    });
  }, 60_000);
});
