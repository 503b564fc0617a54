/**
 * Adversary 78: a `@Cron()` task called by hand (or `getCronJob(name).fireOnTick()`) after its
 * current slot's tick ran runs that tick AGAIN once the tick's record is older than
 * `retentionMs`: for any schedule sparser than the retention (a weekly or monthly cron with the
 * default 24 h), every call on the days after the first.
 *
 * The user code: `@Cron('0 0 3 * * 1', { name: 'settle-week' }) @IdempotentTask() settle()`
 * (here a yearly `@Cron('0 0 0 1 1 *')`, whose current slot is months old) and an admin's
 * "run now" that calls `settle()` (or `fireOnTick()`); the purge running (`purgeIntervalMs`,
 * here `IdempotencyPurger.purgeExpired()`), `retentionMs` 1 s standing for the default 24 h
 * against a weekly schedule.
 *
 * Why it breaks: the call claims the slot of the schedule that is current
 * (lib/tasks/idempotent-tasks.service.ts `tickNow` → `slotOf` → lib/tasks/task-slot.ts
 * `cronSlot`, "the schedule's latest time at or before now"), the same slot for the whole
 * period. The tick's record is kept as a request's and purged `retentionMs` after it finished
 * (PURGE_BATCH, lib/claim/postgres-statements.ts), whatever the schedule's period: a later call
 * in the same period finds no key and runs the slot anew.
 *
 * The docs it contradicts: docs/guides/schedule.md, "Limits": "calling it yourself (from a
 * controller, `job.fireOnTick()`, a job of your own made with `addCronJob`) claims the slot of
 * its schedule that is current, and does nothing if that tick ran"; "The rules": the others
 * skip it, "and so does a replica whose timer fires after it is done".
 *
 * Severity: low (the guide advises putting the work in a method of its own, and the tick's own
 * timer does not fire twice; but a documented "does nothing" runs the week's settlement again).
 * Same root as adversary78-tasks-interval-retention-rerun.
 *
 * Fails now: the second call, after the purge, runs the slot again: two rows for one slot.
 *
 * Control: the same two calls and purge with the default `retentionMs`: one row.
 *
 * Suggested fix: keep a tick's record while its slot is current (until its schedule's next
 * time, or `retentionMs` after it finished, whichever is later): the purge leaves a
 * `schedule:` key whose slot is still its task's latest, or the record carries its own expiry.
 * Fixed: a tick's record is kept until its slot ends (its interval's window, its cron's next
 * time): after the tick commits its record (or its failure), lib/tasks/idempotent-tasks.service.ts
 * `holdRecord` moves its `finished_at` to the slot's end less `retentionMs` where that is later
 * (lib/tasks/task-slot.ts `tickRecordFinishedAt`, a pure decision; HOLD_TICK_RECORD in
 * lib/claim/postgres-statements.ts; the slot's end from lib/tasks/task-schedule.ts
 * `cronTimeSlotEnd` for a cron), so the purge, wherever it runs, keeps it while the slot is
 * current. docs/guides/schedule.md says so.
 */
import 'reflect-metadata';
import { Injectable, Module, type INestApplicationContext } from '@nestjs/common';
import { NestFactory } from '@nestjs/core';
import { Cron, ScheduleModule } from '@nestjs/schedule';
import { Pool } from 'pg';
import {
  currentTick,
  IdempotencyModule,
  IdempotencyPurger,
  IdempotentTask,
} from '../../../lib/index.js';
import { createMigratedDatabase, type MigratedDatabase } from '../../support/migrated-database.js';

let database: MigratedDatabase;
let pool: Pool;

@Injectable()
class SettleTask {
  // Yearly: its current slot (January 1st) is months old, as a weekly cron's is for days.
  @Cron('0 0 0 1 1 *', { name: 'settle-year' })
  @IdempotentTask()
  async settle() {
    await pool.query('INSERT INTO settlements (slot) VALUES ($1)', [currentTick()!.slot]);
  }
}

async function twoCallsWithPurgeBetween(retention: object) {
  await pool.query('TRUNCATE settlements');
  await pool.query('DELETE FROM idempotency_keys');
  @Module({
    imports: [
      ScheduleModule.forRoot(),
      IdempotencyModule.forRoot({ globalKeys: true, pool, ...retention }),
    ],
    providers: [SettleTask],
  })
  class AppModule {}
  const app: INestApplicationContext = await NestFactory.createApplicationContext(AppModule, {
    logger: ['error'],
  });
  try {
    const task = app.get(SettleTask);
    await task.settle();
    await new Promise((resolve) => setTimeout(resolve, 1_500));
    await app.get(IdempotencyPurger).purgeExpired();
    await task.settle();
    const { rows } = await pool.query<{ slot: Date }>('SELECT slot FROM settlements ORDER BY id');
    return rows.map((row) => row.slot.toISOString());
  } finally {
    await app.close();
  }
}

describe('adversary 78: a @Cron() task called by hand after its tick ran', () => {
  beforeAll(async () => {
    database = await createMigratedDatabase('adv78_cron_by_hand');
    pool = new Pool({ connectionString: database.url, max: 4 });
    await pool.query('CREATE TABLE settlements (id serial PRIMARY KEY, slot timestamptz NOT NULL)');
  }, 60_000);

  afterAll(async () => {
    await pool?.end();
    await database?.drop();
  });

  it('control: the default retentionMs; the second call does nothing', async () => {
    const slots = await twoCallsWithPurgeBetween({});
    expect(slots).toHaveLength(1);
  }, 60_000);

  // Fixed (round 78 fixer)
  it('its record past retentionMs: the second call still does nothing', async () => {
    const slots = await twoCallsWithPurgeBetween({ retentionMs: 1_000 });
    // Fails: two rows, both for January 1st: the slot ran again.
    expect(slots).toHaveLength(1);
  }, 60_000);
});
