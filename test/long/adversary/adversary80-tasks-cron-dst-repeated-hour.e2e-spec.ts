/**
 * Adversary 80: a daily `@Cron()` at a local time inside the hour repeated when daylight saving
 * time ends (`@Cron('0 30 2 * * *', { timeZone: 'Europe/Berlin' })`, the nightly job at 02:30)
 * runs TWICE that night across replicas: once at 02:30 CEST on the replica that was up, and
 * again at 02:30 CET (an hour later) on a replica that started, or restarted, in between (a
 * rolling deploy, a crash loop), or on a call by hand in that hour.
 *
 * The user code: the guide's settlement task with a nightly schedule in its own zone,
 * `@Cron('0 30 2 * * *', { name: 'nightly', timeZone: 'Europe/Berlin' }) @IdempotentTask()
 * settle()` inserting a row for `currentTick().slot`, run by several replicas (here two Nest
 * apps on one database; each replica's timer firing is the method called at the time cron
 * would fire it, `Date.now()` set to that time).
 *
 * Why it breaks: `cron` (4.x) fires the replica that was up at 2026-10-25T00:30Z (02:30 CEST) and
 * then sets its next time from there: 2026-10-26T01:30Z; it never fires 01:30Z (02:30 CET) on
 * that replica. A replica whose job started between the two (00:30Z..01:30Z) sets its first
 * time from its start: `getNextDateFrom(01:00Z)` is 01:30Z (asserted below), and it fires
 * then. lib/tasks/idempotent-tasks.service.ts `slotOf` → lib/tasks/task-schedule.ts
 * `cronTimeSlot` → lib/tasks/task-slot.ts `cronSlot` looks back from the tick by 1 s, 2 s, 4 s...
 * and takes the first time found, then walks forward: from 01:29:58Z the next time is 01:30Z,
 * so the slot is 01:30Z, a key of its own (`schedule:nightly` / `2026-10-25T01:30:00.000Z`),
 * never run: the second replica runs the night's settlement again. The slot depends on how far
 * back it is looked for (from a day before, the chain 00:30Z → 10-26T01:30Z would give 00:30Z,
 * as the first replica's cron has it): it is not "the same on every replica".
 *
 * The docs it contradicts: docs/guides/schedule.md, "A tick's key is its **slot**, the time it
 * stands for, the same on every replica"; "The rules": "fires on several replicas | one runs it
 * (the first to claim its slot); the others skip it, and so does a replica whose timer fires
 * after it is done"; "Limits": calling it yourself "claims the slot of its schedule that is
 * current, and does nothing if that tick ran".
 *
 * Severity: medium (nightly jobs sit at 02:00-03:00 local time by habit, exactly the repeated
 * hour; a deploy or restart in that hour, or an admin's "run now", settles the night twice; a
 * payout run pays twice). Once a year per zone.
 *
 * Fails now: two rows, slots 2026-10-25T00:30:00.000Z and 2026-10-25T01:30:00.000Z.
 *
 * Control: the same two replicas and the same late call on a night without a change of time
 * (2026-10-18): one row.
 *
 * Suggested fix: read a cron's slot as the time its own chain of times reached, not the first
 * time after an arbitrary look-back: walk `getNextDateFrom` forward from a fixed anchor well
 * before the tick (the previous day's start in its zone, or further for sparser schedules; a
 * week/a month found by the same doubling, but the chain then walked from there), so that a
 * time `cron` skips from the time before it (the repeated hour's second 02:30) is never a slot;
 * or take the slot end of the previous slot (`cronTimeSlotEnd`) as the only next slot.
 *
 * Fixed: lib/tasks/task-slot.ts `cronSlot` walks to the latest time from a time away from any
 * change of the zone's offset (`steadyBy`, the offset read by lib/tasks/zone-offset.ts), so a
 * slot is always a time of the run a replica up all along makes; a time `cron` skips from the
 * one before it (the repeated hour's second 02:30) is never one (table: task-slot-dst.spec.ts).
 */
import 'reflect-metadata';
import { Injectable, Module, type INestApplicationContext } from '@nestjs/common';
import { NestFactory } from '@nestjs/core';
import { Cron, ScheduleModule } from '@nestjs/schedule';
import { CronTime } from 'cron';
import { Pool } from 'pg';
import { currentTick, IdempotencyModule, IdempotentTask } from '../../../lib/index.js';
import { createMigratedDatabase, type MigratedDatabase } from '../../support/migrated-database.js';

const ZONE = 'Europe/Berlin';
const NIGHTLY = '0 30 2 * * *';

let database: MigratedDatabase;
let pool: Pool;

@Injectable()
class NightlyTask {
  @Cron(NIGHTLY, { name: 'nightly', timeZone: ZONE })
  @IdempotentTask()
  async settle() {
    await pool.query('INSERT INTO settlements (slot) VALUES ($1)', [currentTick()!.slot]);
  }
}

const realNow = Date.now.bind(Date);

/** Calls `fire` as a timer firing at `iso` would: `Date.now()` reads that time meanwhile. */
async function at(iso: string, fire: () => Promise<unknown>): Promise<void> {
  const fixed = Date.parse(iso);
  Date.now = () => fixed;
  try {
    await fire();
  } finally {
    Date.now = realNow;
  }
}

/** Two replicas: the first's timer fires at `first`, the second's at `second`. */
async function twoReplicas(first: string, second: string): Promise<string[]> {
  await pool.query('TRUNCATE settlements');
  await pool.query('DELETE FROM idempotency_keys');
  @Module({
    imports: [ScheduleModule.forRoot(), IdempotencyModule.forRoot({ globalKeys: true, pool })],
    providers: [NightlyTask],
  })
  class AppModule {}
  const replicas: INestApplicationContext[] = [];
  try {
    for (let i = 0; i < 2; i++) {
      replicas.push(await NestFactory.createApplicationContext(AppModule, { logger: ['error'] }));
    }
    await at(first, () => replicas[0].get(NightlyTask).settle());
    await at(second, () => replicas[1].get(NightlyTask).settle());
    const { rows } = await pool.query<{ slot: Date }>('SELECT slot FROM settlements ORDER BY id');
    return rows.map((row) => row.slot.toISOString());
  } finally {
    for (const replica of replicas) await replica.close();
  }
}

describe('adversary 80: a nightly @Cron() in the hour repeated as daylight saving time ends', () => {
  beforeAll(async () => {
    database = await createMigratedDatabase('adv80_cron_dst');
    pool = new Pool({ connectionString: database.url, max: 4 });
    await pool.query('CREATE TABLE settlements (id serial PRIMARY KEY, slot timestamptz NOT NULL)');
  }, 60_000);

  afterAll(async () => {
    Date.now = realNow;
    await pool?.end();
    await database?.drop();
  });

  it('the premise: cron fires the replica up at 02:30 CEST once, one started after at 02:30 CET', () => {
    const time = new CronTime(NIGHTLY, ZONE);
    const next = (iso: string) =>
      new Date(time.getNextDateFrom(new Date(iso), ZONE).toMillis()).toISOString();
    // The replica that fired at 02:30 CEST sets its next time to the next night.
    expect(next('2026-10-25T00:30:00.000Z')).toBe('2026-10-26T01:30:00.000Z');
    // A replica started at 03:00 CEST (01:00Z) fires at 02:30 CET, an hour later.
    expect(next('2026-10-25T01:00:00.000Z')).toBe('2026-10-25T01:30:00.000Z');
  });

  it('control: a night without a change of time; the later replica and a late call skip it', async () => {
    // 2026-10-18: 02:30 CEST is 00:30Z; the second replica's timer fires a little later, and
    // an hour later (a call by hand) it is still the night's slot.
    const slots = await twoReplicas('2026-10-18T00:30:00.050Z', '2026-10-18T01:30:00.050Z');
    expect(slots).toEqual(['2026-10-18T00:30:00.000Z']);
  }, 60_000);

  it('the night the clocks go back: one settlement, the second replica skips it', async () => {
    const slots = await twoReplicas('2026-10-25T00:30:00.050Z', '2026-10-25T01:30:00.050Z');
    expect(slots).toEqual(['2026-10-25T00:30:00.000Z']);
  }, 60_000);
});
