/**
 * Adversary 88: a tick run by a replica whose clock is AHEAD of the database's (by less than
 * the minute the guide allows) skips keeping its record past its slot's end: the purge then
 * deletes it before the slot is over for a replica whose clock is behind (also within the
 * minute), which claims the slot again. The window's settlement runs twice.
 *
 * User code: the guide's settlement task (schedule.md: `@Interval()` + `@IdempotentTask()`
 * inserting a row for `currentTick()!.slot`), its interval longer than the retention allows for
 * (the guide's own case: "however short the retention (a weekly `@Interval()` under the
 * default 24 h)"; here scaled: 20 s windows, `retentionMs: 65_000`), the purge running
 * (`purgeIntervalMs`; here `IdempotencyPurger.purgeExpired()` called), two replicas (two Nest
 * apps on one database). Replica A's clock is 15 s ahead of the database's, replica B's 55 s
 * behind: both within "a minute" (schedule.md). Their timers are simulated as in adversaries
 * 80 and 82: the method called with `Date.now()` reading the replica's clock (the apps'
 * real interval timers are deleted from the SchedulerRegistry so that they do not tick).
 *
 * Code path: lib/tasks/idempotent-tasks.service.ts `runSlot` → `holdRecord`, which decides with
 * `tickRecordFinishedAt(slotEndMs, retentionMs, Date.now())` (lib/tasks/task-slot.ts) whether
 * the record's `finished_at` must be moved later: it compares the wanted `finished_at`
 * (`slotEnd + CLOCK_SKEW_MS - retentionMs`) with the REPLICA's clock, where the record's
 * actual `finished_at` is the DATABASE's `clock_timestamp()` (lib/claim/postgres-statements.ts,
 * statement 5). On a replica δ ahead, a wanted `finished_at` up to δ past the real one reads as
 * "already past": the hold is skipped, and PURGE_BATCH (`finished_at < now() - retention`)
 * deletes the record up to δ before `slotEnd + CLOCK_SKEW_MS`.
 *
 * Docs quote (docs/guides/schedule.md, "The rules"): "runs and commits | done: its record kept
 * for `retentionMs`, as a request's, and at least until its slot ends (its interval's window,
 * its cron's next time) and a minute after: a replica whose timer fires late in the window, or
 * whose clock is behind the database's by up to a minute, or a call by hand, still finds it,
 * however short the retention"; "fires on a replica whose clock is ahead of the database's |
 * waits for its slot by the database's clock ... A clock behind fires late and finds its
 * ticks taken (their records are kept a minute past their slots' ends for it; keep clocks
 * within that, as for a clock ahead)".
 *
 * Severity: high by the rubric (a tick's effect twice: the window settled twice, silently),
 * rare in practice: a task sparser than its retention allows for, one replica's clock ahead
 * (any amount up to the minute), another behind, and the purge landing in the gap (as
 * adversary 82, whose fix this gap bypasses).
 *
 * Fails now (the skipped case unskipped): the 'ahead' task's rows of the window are ['ahead',
 * 'ahead'], expected ['ahead']: the slot ticked by the fast-clock replica was run again by B
 * after the purge (the control's task, ticked on a right clock, has one row). Checked by
 * running the file with `it.skip` turned into `it` (1 failed, 1 passed, 86 s).
 *
 * Control: the same two replicas, B's clock as slow, the purge as timed, but A's clock right:
 * its record is held to `slotEnd + 60 s - retention`, B finds it done (one row).
 *
 * Suggested fix: decide the hold by the database's clock, not the replica's: always run
 * HOLD_TICK_RECORD when a hold is wanted at all (its `greatest(finished_at, …)` already keeps
 * whichever is later), or compare with the `clock_timestamp()` the record was stored at (the
 * tick already reads the database's clock in `slotHasCome`).
 *
 * Fixed (session of 2026-12-06, third): `tickRecordFinishedAt` (lib/tasks/task-slot.ts)
 * decides the hold by the database's clock as `slotHasCome` read it before the tick (the
 * record's `finished_at` is that clock's, and no earlier), passed on through `runSlot` to
 * `holdRecord` (lib/tasks/idempotent-tasks.service.ts); where that clock was not read, the
 * hold is sent and its `greatest()` decides. The replica's clock no longer enters it.
 */
import 'reflect-metadata';
import { Injectable, Module, type INestApplicationContext } from '@nestjs/common';
import { NestFactory } from '@nestjs/core';
import { Interval, ScheduleModule, SchedulerRegistry } from '@nestjs/schedule';
import { Pool } from 'pg';
import {
  currentTick,
  IdempotencyModule,
  IdempotencyPurger,
  IdempotentTask,
} from '../../../lib/index.js';
import { createMigratedDatabase, type MigratedDatabase } from '../../support/migrated-database.js';

const EVERY_MS = 20_000;
const RETENTION_MS = 65_000;
/** Replica A's clock, ahead of the real (and the database's) clock, for the task 'ahead'. */
const AHEAD_MS = 15_000;
/** Replica B's clock, behind. */
const BEHIND_MS = 55_000;

let database: MigratedDatabase;
let pool: Pool;

@Injectable()
class RightClockSettle {
  @IdempotentTask({ name: 'adv88-right' })
  @Interval(EVERY_MS)
  async settle() {
    await pool.query(`INSERT INTO settlements (task, slot) VALUES ('right', $1)`, [
      currentTick()!.slot,
    ]);
  }
}

@Injectable()
class AheadClockSettle {
  @IdempotentTask({ name: 'adv88-ahead' })
  @Interval(EVERY_MS)
  async settle() {
    await pool.query(`INSERT INTO settlements (task, slot) VALUES ('ahead', $1)`, [
      currentTick()!.slot,
    ]);
  }
}

const realNow = Date.now.bind(Date);
const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

/** Calls `fire` as a timer on a clock `offsetMs` off would: `Date.now()` reads that clock. */
async function onClock(offsetMs: number, fire: () => Promise<unknown>): Promise<void> {
  Date.now = () => realNow() + offsetMs;
  try {
    await fire();
  } finally {
    Date.now = realNow;
  }
}

let tasksOfWindow: string[] = [];

/**
 * Early in a window, replica A ticks both tasks: 'right' on a right clock, 'ahead' on its clock
 * 15 s ahead (its local time still in the window, so no wait). 67 s into the window the purge
 * runs; then replica B, 55 s behind (its clock 12 s into the window), ticks both.
 */
async function scenario(): Promise<string[]> {
  @Module({
    imports: [
      ScheduleModule.forRoot(),
      IdempotencyModule.forRoot({ globalKeys: true, pool, retentionMs: RETENTION_MS }),
    ],
    providers: [RightClockSettle, AheadClockSettle],
  })
  class AppModule {}
  const replicas: INestApplicationContext[] = [];
  try {
    for (let i = 0; i < 2; i++) {
      const app = await NestFactory.createApplicationContext(AppModule, { logger: ['error'] });
      // Their timers simulated by hand, on each replica's clock.
      const registry = app.get(SchedulerRegistry);
      for (const name of registry.getIntervals()) registry.deleteInterval(name);
      replicas.push(app);
    }
    const intoWindow = realNow() % EVERY_MS;
    if (intoWindow > 300) await sleep(EVERY_MS - intoWindow + 200);
    const window = Math.floor(realNow() / EVERY_MS) * EVERY_MS;
    await onClock(0, () => replicas[0].get(RightClockSettle).settle());
    await onClock(AHEAD_MS, () => replicas[0].get(AheadClockSettle).settle());
    // Both ran in the window, by the database's clock too.
    expect(realNow() - window).toBeLessThan(EVERY_MS - AHEAD_MS);
    await sleep(window + 67_000 - realNow());
    await replicas[0].get(IdempotencyPurger).purgeExpired();
    // B's clock reads 12 s into the window: its timer fires in it.
    expect(realNow() - BEHIND_MS).toBeLessThan(window + EVERY_MS);
    expect(realNow() - BEHIND_MS).toBeGreaterThanOrEqual(window);
    await onClock(-BEHIND_MS, () => replicas[1].get(RightClockSettle).settle());
    await onClock(-BEHIND_MS, () => replicas[1].get(AheadClockSettle).settle());
    const { rows } = await pool.query<{ task: string }>(
      'SELECT task FROM settlements WHERE slot = $1 ORDER BY id',
      [new Date(window)],
    );
    return rows.map((row) => row.task);
  } finally {
    for (const replica of replicas) await replica.close();
  }
}

describe('adversary 88: a tick run on a fast clock skips holding its record; a slow clock runs it again', () => {
  beforeAll(async () => {
    database = await createMigratedDatabase('adv88_hold_fast_clock');
    pool = new Pool({ connectionString: database.url, max: 4 });
    await pool.query(
      'CREATE TABLE settlements (id serial PRIMARY KEY, task text NOT NULL, slot timestamptz NOT NULL)',
    );
    tasksOfWindow = await scenario();
  }, 150_000);

  afterAll(async () => {
    Date.now = realNow;
    await pool?.end();
    await database?.drop();
  });

  it('control: ticked on a right clock, its record outlasts the purge; the slow replica skips it', () => {
    expect(tasksOfWindow.filter((task) => task === 'right')).toEqual(['right']);
  });

  it('ticked on a clock 15 s ahead, its record outlasts the purge too; the slow replica skips it', () => {
    // Fails: ['ahead', 'ahead'] (the window settled by A, then again by B after the purge).
    expect(tasksOfWindow.filter((task) => task === 'ahead')).toEqual(['ahead']);
  });
});
