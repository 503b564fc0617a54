/**
 * A replica for the adversary-60 scheduled-task tests, in a process of its own: one
 * `@Cron(CRON, { name: 'settle' })` + `@IdempotentTask()` task on TypeORM (the docs' worker
 * app: `createApplicationContext`, `enableShutdownHooks()`). Each tick inserts a `begun` row,
 * holds HOLD_MS (in its transaction), then a `finished` row, printing `begun <slot>` and
 * `finished <slot>`. Rows go to `ticks` (test/support/task-replicas.ts): `replica` is
 * `<REPLICA>:begun` / `<REPLICA>:finished`.
 *
 * Env: DATABASE_URL; REPLICA; CRON (default every second); HOLD_MS (default 0); LEASE_MS;
 * HEARTBEAT=0; RESUME_WITHIN_MS; FAIL_RESUMED=1: a resumed tick throws after its `begun` row (FAIL=1: every tick);
 * CLOCK_SKEW_MS: its clock that much off (Date.now(), which cron and the library read);
 * STORE_IF=below500: the module's `storeIf: (status) => status < 500` (adversary 63). Prints `ready` once its timers run.
 */
import 'reflect-metadata';
import { Injectable, Module } from '@nestjs/common';
import { NestFactory } from '@nestjs/core';
import { Cron, ScheduleModule } from '@nestjs/schedule';
import { TypeOrmModule } from '@nestjs/typeorm';
import { DataSource } from 'typeorm';
import {
  currentTick,
  IDEMPOTENCY_MIGRATIONS,
  IdempotencyModule,
  IdempotentTask,
} from '../../lib/index.js';

const env = process.env;
const replica = env.REPLICA ?? 'replica';
const holdMs = Number(env.HOLD_MS ?? 0);
const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

// A replica whose clock is CLOCK_SKEW_MS off (negative: behind, so its timers fire that much
// later than another's for the same time): cron (luxon) and the library read Date.now().
if (env.CLOCK_SKEW_MS) {
  const real = Date.now.bind(Date);
  const skew = Number(env.CLOCK_SKEW_MS);
  Date.now = () => real() + skew;
}

@Injectable()
class SettleTask {
  constructor(private readonly dataSource: DataSource) {}

  @Cron(env.CRON ?? '* * * * * *', { name: 'settle' })
  @IdempotentTask({
    ...(env.HEARTBEAT === '0' ? { heartbeat: false } : {}),
    ...(env.RESUME_WITHIN_MS ? { resumeWithinMs: Number(env.RESUME_WITHIN_MS) } : {}),
  })
  async settle() {
    const tick = currentTick()!;
    const slot = tick.slot.toISOString();
    const row = (stage: string) =>
      this.dataSource.query('INSERT INTO ticks (slot, replica, resumed) VALUES ($1, $2, $3)', [
        tick.slot,
        `${replica}:${stage}`,
        tick.resumed,
      ]);
    await row('begun');
    console.log(`begun ${slot}${tick.resumed ? ' resumed' : ''}`);
    if (env.FAIL === '1' || (env.FAIL_RESUMED === '1' && tick.resumed)) {
      throw new Error(`the ledger refused the resumed tick of ${slot}`);
    }
    if (holdMs) await sleep(holdMs);
    await row('finished');
    console.log(`finished ${slot}`);
  }
}

@Module({
  imports: [
    ScheduleModule.forRoot(),
    TypeOrmModule.forRoot({
      type: 'postgres',
      url: env.DATABASE_URL,
      migrations: [...IDEMPOTENCY_MIGRATIONS],
      migrationsRun: true,
      logging: false,
    }),
    IdempotencyModule.forRoot({
      globalKeys: true,
      ...(env.LEASE_MS ? { leaseMs: Number(env.LEASE_MS) } : {}),
      ...(env.STORE_IF === 'below500' ? { storeIf: (status: number) => status < 500 } : {}),
    }),
  ],
  providers: [SettleTask],
})
class ReplicaModule {}

const app = await NestFactory.createApplicationContext(ReplicaModule, {
  logger: ['error', 'warn'],
});
app.enableShutdownHooks();
console.log('ready');
