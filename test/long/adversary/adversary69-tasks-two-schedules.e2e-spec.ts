/**
 * Adversary 69: a method with two `@nestjs/schedule` decorators is keyed by a schedule that
 * does not run it. `@nestjs/schedule` keeps ONE scheduler type per method (`SCHEDULER_TYPE`,
 * a single metadata value: the decorator applied last, the topmost, wins) and registers only
 * that one; the library's `scheduleOf` (lib/tasks/task-schedule.ts) reads `@Cron()`'s options
 * first whenever they are there. So:
 *  - `@Interval(500)` above `@Cron('0 0 0 1 1 *')` (a method moved from a yearly cron to an
 *    interval, the old decorator left below; or a shared decorator stack): `@nestjs/schedule`
 *    ticks it every 500 ms, and the library keys every tick by the cron's slot (1 January):
 *    the first tick runs, every other one finds that slot done and is skipped
 *    (`tickSkipped` 'done'), silently, for the rest of the year;
 *  - `@Timeout(100)` above `@Cron(...)`: `@nestjs/schedule` runs it once per replica as it
 *    starts, the very case schedule.md says is "refused at start-up"; it is not refused.
 *
 * Expected (docs/guides/schedule.md): an `@Interval(ms)` tick's slot is "the ms-wide window,
 * counted from the epoch, that the tick fired in ... the first tick of each window runs";
 * "`@Timeout()` is refused at start-up ... and so is a method with no schedule". Either key a
 * tick by the schedule `@nestjs/schedule` runs, or refuse two schedules on one method at
 * start-up, saying so.
 *
 * Control: the same `@Interval(500)` alone runs a tick in each window (≥ 5 in ~3.2 s).
 *
 * Severity: medium for the interval (a single replica, no crash: the task's ticks stop
 * running with no error, only a debug-level skip event); low for the timeout (a stated
 * start-up refusal bypassed).
 *
 * Fixed: a method with more than one of `@Cron()`, `@Interval()`, `@Timeout()` is refused at start-up
 * (`scheduleOf` kind `several`, `IdempotentTaskSchedulesError`).
 */
import 'reflect-metadata';
import { Injectable, Module } from '@nestjs/common';
import { NestFactory } from '@nestjs/core';
import { Cron, Interval, ScheduleModule, Timeout } from '@nestjs/schedule';
import { Pool } from 'pg';
import { IdempotencyModule, IdempotentTask } from '../../../lib/index.js';
import { createMigratedDatabase, type MigratedDatabase } from '../../support/migrated-database.js';

let database: MigratedDatabase;
let pool: Pool;
const runs = new Map<string, number>();
const ran = (name: string) => runs.set(name, (runs.get(name) ?? 0) + 1);

/** Starts an app with `provider`, lets it tick for `ms`; its runs, or why it would not start. */
async function tickFor(provider: new (...args: never[]) => object, name: string, ms: number) {
  @Module({
    imports: [ScheduleModule.forRoot(), IdempotencyModule.forRoot({ globalKeys: true, pool })],
    providers: [provider],
  })
  class AppModule {}
  let app;
  try {
    app = await NestFactory.createApplicationContext(AppModule, { logger: [] });
    await app.init();
  } catch (error) {
    await app?.close().catch(() => undefined);
    return { refused: (error as Error).message, runs: runs.get(name) ?? 0 };
  }
  try {
    await new Promise((resolve) => setTimeout(resolve, ms));
  } finally {
    await app.close();
  }
  return { refused: undefined, runs: runs.get(name) ?? 0 };
}

@Injectable()
class IntervalAlone {
  @Interval('adv69-alone', 500)
  @IdempotentTask()
  async sweep() {
    ran('alone');
    await pool.query('SELECT 1');
  }
}

@Injectable()
class IntervalOverCron {
  // The method ticks every 500 ms (the topmost decorator is the one @nestjs/schedule runs).
  @Interval('adv69-over-cron', 500)
  @Cron('0 0 0 1 1 *')
  @IdempotentTask()
  async sweep() {
    ran('over-cron');
    await pool.query('SELECT 1');
  }
}

@Injectable()
class TimeoutOverCron {
  @Timeout('adv69-timeout', 100)
  @Cron('0 0 0 1 1 *')
  @IdempotentTask()
  async warm() {
    ran('timeout');
    await pool.query('SELECT 1');
  }
}

describe('adversary 69: two schedules on one @IdempotentTask() method', () => {
  beforeAll(async () => {
    database = await createMigratedDatabase('adv69_two_schedules');
    pool = new Pool({ connectionString: database.url, max: 4 });
  }, 60_000);

  afterAll(async () => {
    await pool?.end();
    await database?.drop();
  });

  it('control: @Interval(500) alone runs a tick in each window', async () => {
    const result = await tickFor(IntervalAlone, 'alone', 3_200);
    expect(result.refused).toBeUndefined();
    expect(result.runs).toBeGreaterThanOrEqual(5);
  }, 60_000);

  it('@Interval(500) over @Cron(yearly): each interval tick runs, or it is refused at start-up', async () => {
    const result = await tickFor(IntervalOverCron, 'over-cron', 3_200);
    // Fails: 'ran 1 of ~6 ticks' (every tick after the first keyed by 1 January, skipped as done).
    expect(
      result.refused !== undefined
        ? 'refused'
        : result.runs >= 5
          ? 'each tick ran'
          : `ran ${result.runs} of ~6 ticks`,
    ).toMatch(/^(refused|each tick ran)$/);
  }, 60_000);

  it('@Timeout() over @Cron() is refused at start-up, as @Timeout() is', async () => {
    const result = await tickFor(TimeoutOverCron, 'timeout', 1_000);
    // Fails: 'not refused, ran 1' (@nestjs/schedule runs it once as each replica starts).
    expect(result.refused ?? `not refused, ran ${result.runs}`).toMatch(/Timeout/);
  }, 60_000);
});
