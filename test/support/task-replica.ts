/**
 * A replica of a small app with one scheduled task, in a process of its own, for the
 * scheduled-task tests: `@nestjs/schedule` ticks it (every second by `@Cron()`, or every
 * INTERVAL_MS by `@Interval()`), and each tick records its slot in `ticks` through
 * `@IdempotentTask()` (or without it: IDEMPOTENT=0, the control). Real processes, so that the
 * replicas' timers are their own and a test can SIGKILL one mid-tick.
 *
 * Env: DATABASE_URL; REPLICA (its name in the rows); SCHEDULE=cron (default) or interval
 * (INTERVAL_MS, default 500); SEAM=pool joins through a node-postgres pool instead of TypeORM
 * (the schema must be there); LEASE_MS (the module's lease). PSP_URL: each tick pays the PSP
 * first (`PhaseRunner.call`, its derived key as Idempotency-Key), printing `called <slot>`,
 * then holds HOLD_MS (the test kills it there) before it records its row. FAIL=1: each tick
 * throws after its insert. Prints `ready` once its timers run.
 */
import 'reflect-metadata';
import { Injectable, Module } from '@nestjs/common';
import { ModuleRef, NestFactory } from '@nestjs/core';
import { Cron, Interval, ScheduleModule } from '@nestjs/schedule';
import { TypeOrmModule } from '@nestjs/typeorm';
import { Pool } from 'pg';
import { DataSource } from 'typeorm';
import {
  currentTick,
  IDEMPOTENCY_MIGRATIONS,
  IdempotencyModule,
  IdempotentTask,
  PhaseRunner,
} from '../../lib/index.js';

const env = process.env;
const replica = env.REPLICA ?? 'replica';
const idempotent = env.IDEMPOTENT !== '0';
const everyMs = Number(env.INTERVAL_MS ?? 500);
const pool =
  env.SEAM === 'pool' ? new Pool({ connectionString: env.DATABASE_URL, max: 4 }) : undefined;
const lease = env.LEASE_MS ? { leaseMs: Number(env.LEASE_MS) } : {};
const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

/** The tick's slot: the library's, or (the control) the window it fired in. */
function slotNow(): Date {
  const tick = currentTick();
  if (tick) return tick.slot;
  const width = env.SCHEDULE === 'interval' ? everyMs : 1_000;
  return new Date(Math.floor(Date.now() / width) * width);
}

@Injectable()
class Ledger {
  constructor(private readonly moduleRef: ModuleRef) {}

  private query(text: string, values: unknown[]): Promise<unknown> {
    return pool
      ? pool.query(text, values)
      : this.moduleRef.get(DataSource, { strict: false }).query(text, values);
  }

  async record(): Promise<void> {
    const slot = slotNow();
    let transfer: string | null = null;
    if (env.PSP_URL) {
      const phases = this.moduleRef.get(PhaseRunner, { strict: false });
      const paid = await phases.call('psp_paid', async ({ idempotencyKey }) => {
        const answer = await fetch(env.PSP_URL!, {
          method: 'POST',
          headers: { 'idempotency-key': idempotencyKey, 'content-type': 'application/json' },
          body: '{}',
        });
        return (await answer.json()) as { transfer: string };
      });
      transfer = paid.transfer;
      console.log(`called ${slot.toISOString()}`);
      if (env.HOLD_MS) await sleep(Number(env.HOLD_MS));
    }
    await this.query(
      'INSERT INTO ticks (slot, replica, resumed, transfer) VALUES ($1, $2, $3, $4)',
      [slot, replica, currentTick()?.resumed ?? false, transfer],
    );
    if (env.FAIL === '1') throw new Error(`the ledger refused the tick of ${slot.toISOString()}`);
  }
}

/** The task every second, the library's decorator below `@Cron()`. */
@Injectable()
class CronTask {
  constructor(private readonly ledger: Ledger) {}

  @Cron('* * * * * *', { name: 'settle' })
  @IdempotentTask()
  settle() {
    return this.ledger.record();
  }
}

/** The task every INTERVAL_MS, the library's decorator above `@Interval()`. */
@Injectable()
class IntervalTask {
  constructor(private readonly ledger: Ledger) {}

  @IdempotentTask()
  @Interval('settle', everyMs)
  settle() {
    return this.ledger.record();
  }
}

/** The control: the same task without the library, on every replica. */
@Injectable()
class UnguardedCronTask {
  constructor(private readonly ledger: Ledger) {}

  @Cron('* * * * * *')
  settle() {
    return this.ledger.record();
  }
}

@Injectable()
class UnguardedIntervalTask {
  constructor(private readonly ledger: Ledger) {}

  @Interval(everyMs)
  settle() {
    return this.ledger.record();
  }
}

const byInterval = env.SCHEDULE === 'interval';
const task = idempotent
  ? byInterval
    ? IntervalTask
    : CronTask
  : byInterval
    ? UnguardedIntervalTask
    : UnguardedCronTask;

@Module({
  imports: [
    ScheduleModule.forRoot(),
    ...(pool
      ? [IdempotencyModule.forRoot({ globalKeys: true, pool, ...lease })]
      : [
          TypeOrmModule.forRoot({
            type: 'postgres',
            url: env.DATABASE_URL,
            migrations: [...IDEMPOTENCY_MIGRATIONS],
            migrationsRun: true,
            logging: false,
          }),
          IdempotencyModule.forRoot({ globalKeys: true, ...lease }),
        ]),
  ],
  providers: [Ledger, task],
})
class ReplicaModule {}

const app = await NestFactory.createApplicationContext(ReplicaModule, {
  logger: ['error', 'warn'],
});
app.enableShutdownHooks();
console.log('ready');
