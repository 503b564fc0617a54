/**
 * Adversary 76: an `@Interval()` whose period is not a positive number (the common
 * `@Interval(Number(process.env.SYNC_EVERY_MS))` with the variable unset: NaN; or 0) starts
 * with no word from the library, and then every tick, on every replica, throws
 * `RangeError: Invalid time value` from inside the library: nothing ever runs, and each tick
 * (Node fires a NaN or 0 interval every 1 ms) first queries the database's clock.
 *
 * User code:
 *   @Interval(Number(process.env.SYNC_EVERY_MS)) // unset in this deployment: NaN
 *   @IdempotentTask()
 *   async sync() { await this.rows.insert(...); }
 *
 * Why: `IdempotentTasks.onModuleInit` / `taskOf` (lib/tasks/idempotent-tasks.service.ts)
 * refuse `@Timeout()` and a method with no schedule at start-up, but take the interval's
 * `everyMs` as it is (`scheduleOf`, lib/tasks/task-schedule.ts). At each tick
 * `intervalSlot(now, NaN)` (lib/tasks/task-slot.ts) is NaN (`Math.floor(now / 0) * 0` is NaN
 * too), `untilSlot(NaN, …)` answers `wait NaN ms` (neither comparison holds), the tick sleeps
 * and then `slotKey(NaN)` (`new Date(NaN).toISOString()`) throws RangeError in `tickNow`,
 * which `@nestjs/schedule` logs and forgets, 1000 times a second.
 *
 * Docs: README/brief: "bad input gets a clear, stable error"; docs/guides/schedule.md,
 * Limits: "`@Timeout()` is refused at start-up …, and so is a method with no schedule" (a
 * schedule the library cannot key is refused at start-up, saying so); "Which tick is which":
 * "`@Interval(ms)`: the `ms`-wide window, counted from the epoch" (no window of NaN ms).
 *
 * Severity: low (wrong words, wrong moment: an unclear per-tick RangeError from inside the
 * library instead of a start-up refusal naming the task; nothing is run twice, but the task
 * silently never runs while the app looks healthy, and every replica polls the database's
 * clock every millisecond).
 *
 * Fails now: "started; 0 runs; ticks threw: RangeError: Invalid time value".
 *
 * Fixed: `taskOf` refuses at start-up an `@Interval()` whose period Node would not keep
 * (`isTimerPeriod`, lib/tasks/task-schedule.ts: 1 to 2147483647 ms), with
 * `IdempotentTaskPeriodError` naming the method and the period.
 *
 * (A named one, `@Interval('sync', NaN)`, is keyed instead by the period Node gives the timer,
 * 1 ms (`periodOf` reads `_idleTimeout`): it starts as silently and runs every millisecond on
 * every replica, each in a slot of its own: "once across replicas" means nothing there.)
 *
 * Suggested fix: in `taskOf`, refuse at start-up an interval whose period is not a finite
 * number >= 1 (an `IdempotentTaskUnscheduledError`-like error naming the method and the
 * period), as Node would otherwise run it every 1 ms; and guard `intervalSlot`/`slotOf` for
 * a registry period that is not (a named interval re-added with NaN).
 *
 * Control: the same app with a period of 200 ms runs its ticks; and the library's refusal of
 * `@Timeout()` at start-up shows the start-up refusal is the library's way for a schedule it
 * cannot key.
 */
import 'reflect-metadata';
import { Injectable, type LoggerService, Module } from '@nestjs/common';
import { NestFactory } from '@nestjs/core';
import { Interval, ScheduleModule, Timeout } from '@nestjs/schedule';
import { Pool } from 'pg';
import { IdempotencyModule, IdempotentTask } from '../../../lib/index.js';
import { createMigratedDatabase, type MigratedDatabase } from '../../support/migrated-database.js';

let database: MigratedDatabase;
let pool: Pool;
const runs = new Map<string, number>();
const ran = (name: string) => runs.set(name, (runs.get(name) ?? 0) + 1);

/** The period a deployment reads from an unset variable. */
const UNSET_PERIOD = Number(process.env.ADV76_UNSET_SYNC_EVERY_MS);

@Injectable()
class UnsetPeriodSync {
  @Interval(UNSET_PERIOD)
  @IdempotentTask()
  async sync() {
    ran('nan');
    await pool.query('SELECT 1');
  }
}

@Injectable()
class SetPeriodSync {
  @Interval('adv76-sync-200', 200)
  @IdempotentTask()
  async sync() {
    ran('200');
    await pool.query('SELECT 1');
  }
}

@Injectable()
class OnceAtStart {
  @Timeout(100)
  @IdempotentTask()
  async warm() {
    ran('timeout');
    await pool.query('SELECT 1');
  }
}

class CapturingLogger implements LoggerService {
  readonly errors: string[] = [];
  log() {}
  warn() {}
  debug() {}
  verbose() {}
  error(message: unknown) {
    this.errors.push(
      message instanceof Error ? `${message.name}: ${message.message}` : String(message),
    );
  }
}

async function start(provider: new (...args: never[]) => object, name: string, ms: number) {
  @Module({
    imports: [ScheduleModule.forRoot(), IdempotencyModule.forRoot({ globalKeys: true, pool })],
    providers: [provider],
  })
  class AppModule {}
  const logger = new CapturingLogger();
  let app;
  try {
    app = await NestFactory.createApplicationContext(AppModule, { logger, abortOnError: false });
    await app.init();
  } catch (error) {
    await app?.close().catch(() => undefined);
    return `refused at start-up: ${(error as Error).message}`;
  }
  try {
    await new Promise((resolve) => setTimeout(resolve, ms));
  } finally {
    await app.close();
  }
  const count = runs.get(name) ?? 0;
  const thrown = [...new Set(logger.errors)].slice(0, 2).join(' | ');
  return `started; ${count} runs${thrown ? `; ticks threw: ${thrown}` : ''}`;
}

describe('adversary 76: an @Interval() whose period is NaN (an unset variable)', () => {
  beforeAll(async () => {
    database = await createMigratedDatabase('adv76_interval_nan');
    pool = new Pool({ connectionString: database.url, max: 4 });
  }, 60_000);

  afterAll(async () => {
    await pool?.end();
    await database?.drop();
  });

  it('control: the same task with a period of 200 ms runs its ticks', async () => {
    const outcome = await start(SetPeriodSync, '200', 1_500);
    expect(outcome).toMatch(/^started; ([2-9]|\d\d+) runs$/);
  }, 60_000);

  it('control: a schedule the library cannot key (@Timeout) is refused at start-up', async () => {
    const outcome = await start(OnceAtStart, 'timeout', 500);
    expect(outcome).toMatch(/^refused at start-up: .*OnceAtStart\.warm/);
  }, 60_000);

  it('a NaN period is refused at start-up, naming the task, not a RangeError per tick', async () => {
    expect(Number.isNaN(UNSET_PERIOD)).toBe(true);
    const outcome = await start(UnsetPeriodSync, 'nan', 500);
    // Fails: 'started; 0 runs; ticks threw: RangeError: Invalid time value'.
    expect(outcome).toMatch(/^refused at start-up: .*UnsetPeriodSync\.sync/);
  }, 60_000);
});
