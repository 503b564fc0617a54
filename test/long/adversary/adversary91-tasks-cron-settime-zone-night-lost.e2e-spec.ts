/**
 * Fixed (session of 2026-12-06 fourth): a cron tick's occurrence is marked and checked only
 * where its schedule is read in the process's own zone (lib/tasks/tick-zone.ts
 * `marksOccurrence`: a `@Cron()` without `timeZone`/`utcOffset`, or a job rescheduled to a
 * `CronTime` with none); a schedule that declares its zone, a rescheduled one included, is read
 * in it on every replica, so its slot alone keys its ticks and the moved schedule's first tick
 * runs.
 *
 * Adversary 91: a named `@Cron()` rescheduled into another zone (`SchedulerRegistry
 * .getCronJob(name).setTime(new CronTime('0 0 2 * * *', 'America/New_York'))`, Nest's dynamic
 * cron recipe; a one-zone app, `timeZone` set everywhere, no start-up warning) loses the first
 * tick of its new schedule when that tick's wall-clock time in the new zone equals one the old
 * schedule already ran in its old zone: the occurrence mark (`@<date>T02:00:00.000`, zone
 * `UTC`, written by the 02:00Z tick) refuses the 02:00 New York tick (07:00Z) as a "replica
 * reading it in UTC", and nothing ever runs that slot. The error logged blames replicas in
 * two zones, of which there are none.
 *
 * User code:
 *   @Cron('0 0 2 * * *', { name: 'adv91-report', timeZone: 'UTC' }) @IdempotentTask()
 *   async report() { await pool.query('INSERT INTO reports ...', [currentTick()!.slot]) }
 *   // later, the tenant moved (configuration):
 *   registry.getCronJob('adv91-report').setTime(new CronTime('0 0 2 * * *', 'America/New_York'))
 *
 * Code path: lib/tasks/idempotent-tasks.service.ts `tickNow` → `zoneAgrees` (`MARK_OCCURRENCE`
 * with `occurrenceKey(slot, zone)`, zone from the registry's `CronTime`) →
 * lib/tasks/tick-zone.ts `tickZoneVerdict` (refuse: another zone's mark, another instant); the
 * occurrence key holds only the wall-clock time, not the schedule or the fact that the zone is
 * the schedule's own (`timeZone`), not a replica's process zone.
 *
 * Docs quote (docs/guides/schedule.md): "a named cron rescheduled (`getCronJob(name)
 * .setTime(...)`) is keyed by its new schedule"; "`@IdempotentTask()` runs each tick once";
 * the zone mark is described for "a replica in another zone", "Replicas must read a cron in
 * one zone: set `timeZone` on the `@Cron()`" (done here).
 *
 * Severity: medium (a tick lost: the new schedule's first night never runs, with an error
 * naming a cause that is not there; needs a zone change at run time, or a deploy that adds or
 * changes `timeZone`, on a day whose wall-clock time the old zone already ran).
 *
 * Fails now (un-skipped): rows of the 'moved' task are 1 (only the 02:00Z tick), expected 2;
 * logged: "the tick of <day>T07:00:00.000Z (its schedule read in America/New_York) is skipped:
 * a replica reading it in UTC ran the same time as <day>T02:00:00.000Z".
 *
 * Control: the same move to New York at 02:30 (another wall-clock time): both ticks run.
 *
 * Suggested fix: mark an occurrence only for a schedule read in a process's zone (no
 * `timeZone`/`utcOffset` on the `CronTime`), or key the mark by the schedule (its source and
 * zone as declared: a `CronTime` with its own `timeZone` is read alike on every replica, so the
 * slot, its key, already tells its ticks apart); at least refuse only a mark of the same
 * `CronTime` source.
 */
import 'reflect-metadata';
import { Injectable, Module, type INestApplicationContext } from '@nestjs/common';
import { NestFactory } from '@nestjs/core';
import { Cron, ScheduleModule, SchedulerRegistry } from '@nestjs/schedule';
import { CronTime } from 'cron';
import { Pool } from 'pg';
import { currentTick, IdempotencyModule, IdempotentTask } from '../../../lib/index.js';
import { createMigratedDatabase, type MigratedDatabase } from '../../support/migrated-database.js';

let database: MigratedDatabase;
let pool: Pool;

@Injectable()
class MovedReport {
  @Cron('0 0 2 * * *', { name: 'adv91-moved', timeZone: 'UTC' })
  @IdempotentTask()
  async report() {
    await pool.query(`INSERT INTO reports (task, up_to) VALUES ('moved', $1)`, [
      currentTick()!.slot,
    ]);
  }
}

@Injectable()
class MovedOtherTime {
  @Cron('0 0 2 * * *', { name: 'adv91-other-time', timeZone: 'UTC' })
  @IdempotentTask()
  async report() {
    await pool.query(`INSERT INTO reports (task, up_to) VALUES ('other-time', $1)`, [
      currentTick()!.slot,
    ]);
  }
}

const realNow = Date.now.bind(Date);

/** Calls `fire` as the cron timer would at `atMs` (`Date.now()` reads it). */
async function firedAt(atMs: number, fire: () => Promise<unknown>): Promise<void> {
  Date.now = () => atMs + 50;
  try {
    await fire();
  } finally {
    Date.now = realNow;
  }
}

async function scenario(task: 'moved' | 'other-time') {
  @Module({
    imports: [ScheduleModule.forRoot(), IdempotencyModule.forRoot({ globalKeys: true, pool })],
    providers: [MovedReport, MovedOtherTime],
  })
  class AppModule {}
  const app: INestApplicationContext = await NestFactory.createApplicationContext(AppModule, {
    logger: ['error'],
  });
  try {
    const registry = app.get(SchedulerRegistry);
    for (const job of registry.getCronJobs().values()) void job.stop();
    // Yesterday's 02:00Z, so that no wait for the slot applies.
    const today = new Date(realNow());
    const utcNight = Date.UTC(
      today.getUTCFullYear(),
      today.getUTCMonth(),
      today.getUTCDate() - 1,
      2,
    );
    const name = task === 'moved' ? 'adv91-moved' : 'adv91-other-time';
    const fire = () =>
      task === 'moved' ? app.get(MovedReport).report() : app.get(MovedOtherTime).report();
    await firedAt(utcNight, fire);
    // The tenant moved: the same report, at 02:00 (or 02:30) New York time.
    const moved = new CronTime(
      task === 'moved' ? '0 0 2 * * *' : '0 30 2 * * *',
      'America/New_York',
    );
    registry.getCronJob(name).setTime(moved);
    void registry.getCronJob(name).stop();
    const newYorkNight = moved.getNextDateFrom(new Date(utcNight)).toMillis();
    await firedAt(newYorkNight, fire);
    const { rows } = await pool.query<{ up_to: Date }>(
      'SELECT up_to FROM reports WHERE task = $1 ORDER BY id',
      [task],
    );
    return rows.map((row) => row.up_to.toISOString());
  } finally {
    await app.close();
  }
}

describe('adversary 91: a named @Cron() rescheduled into another zone', () => {
  beforeAll(async () => {
    database = await createMigratedDatabase('adv91_settime_zone');
    pool = new Pool({ connectionString: database.url, max: 4 });
    await pool.query(
      'CREATE TABLE reports (id serial PRIMARY KEY, task text NOT NULL, up_to timestamptz NOT NULL)',
    );
  }, 60_000);

  afterAll(async () => {
    Date.now = realNow;
    await pool?.end();
    await database?.drop();
  });

  it('control: moved to 02:30 New York, its first tick there runs', async () => {
    expect(await scenario('other-time')).toHaveLength(2);
  }, 30_000);

  it('moved to 02:00 New York, its first tick there runs', async () => {
    expect(await scenario('moved')).toHaveLength(2);
  }, 30_000);
});
