/**
 * Fixed (session of 2026-12-06 fourth): a cron tick first marks its occurrence, its schedule's
 * wall-clock time in the zone it is read in (lib/tasks/tick-zone.ts `occurrenceKey`: a done row
 * `@2026-12-06T02:00:00.000` of the task's tenant, holding that zone and the tick's instant,
 * kept 27 h past the slot), and a tick whose occurrence another zone's replica marked for
 * another instant is skipped, logged as an error naming both zones and `timeZone`
 * (`tickZoneVerdict`); a `@Cron()` without `timeZone`/`utcOffset` is warned of at start-up
 * (`zoneWarning`). schedule.md says replicas must share their zone or set `timeZone`.
 *
 * Adversary 90: a `@Cron()` task without a `timeZone` is read in each replica's own process
 * zone, so two replicas whose zones differ (`TZ` set on one image and not on another, a VM and
 * a container, a rolling move of the base image) key the same nightly run by two slots: each
 * runs its own, and the night is settled twice, silently (no conflict, no warning; each tick
 * is "done" by its own record).
 *
 * User code: the guide's settlement task shape (schedule.md), nightly:
 * `@Cron('0 0 2 * * *', { name: 'nightly-settle' })` + `@IdempotentTask()` inserting a row for
 * `currentTick()!.slot`; `IdempotencyModule.forRoot({ globalKeys: true, pool })`; replicas (Nest
 * apps on one database) run with `TZ=UTC` and with `TZ=Asia/Kolkata` (here: each replica's
 * `CronTime.timeZone` set to the zone `cron` gives it in such a process, since jest's process
 * cannot change its own zone). Their timers are
 * simulated as in adversaries 80/82/88: the method called at the instant each replica's cron
 * fires, `Date.now()` reading it (last night, so that no wait for the slot applies).
 *
 * Code path: lib/tasks/idempotent-tasks.service.ts `slotOf` → `cronTimeOf` (the registry's
 * `CronTime`, whose `timeZone` `cron` set to the process's zone when it was made) →
 * lib/tasks/task-schedule.ts `cronTimeSlot` (`cronZone(time)`): the slot is the schedule's time
 * in that replica's zone; the key is its ISO instant, so the UTC replica's 02:00Z and the
 * Kolkata replica's 20:30Z (02:00 IST) are two keys of one task.
 *
 * Docs quote (docs/guides/schedule.md): "`@nestjs/schedule` runs a `@Cron()` ... method on every
 * replica of the app: three replicas settle the day three times. `@IdempotentTask()` runs each
 * tick once"; "A tick's key is its **slot**, the time it stands for, the same on every
 * replica"; the rule "read in the zone cron reads it in (its `timeZone`, else its `utcOffset`,
 * else the process's)" says where the zone comes from, but nothing says that replicas must share
 * it, and nothing at start-up or at a tick tells a mixed fleet.
 *
 * Severity: medium (a tick's effect twice: the night settled twice, once per zone in the
 * fleet; needs replicas whose process zones differ and a cron without `timeZone`, the default
 * way `@Cron()` is written).
 *
 * Fails now (the skipped case unskipped): the 'mixed' task's rows are two (slots
 * 02:00Z and 20:30Z the evening before), expected one; the control task, its replicas in one
 * zone, has one.
 *
 * Control: the same task fired on two replicas that share a zone (both `TZ=UTC`): one row, the
 * second replica skips the slot.
 *
 * Suggested fix: keep the zone a task's ticks are read in with its record (or its fingerprint:
 * `schedule:<name>` and the resolved zone) and refuse, loudly, a tick read in another zone
 * (`IdempotentTaskZoneError`: set `timeZone` on the `@Cron()`), or at least warn at start-up
 * for a `@Cron()` task without `timeZone`/`utcOffset`, and say in schedule.md that its
 * replicas must share their `TZ`.
 */
import 'reflect-metadata';
import { Injectable, Module, type INestApplicationContext } from '@nestjs/common';
import { NestFactory } from '@nestjs/core';
import { Cron, ScheduleModule, SchedulerRegistry } from '@nestjs/schedule';
import { Pool } from 'pg';
import { currentTick, IdempotencyModule, IdempotentTask } from '../../../lib/index.js';
import { createMigratedDatabase, type MigratedDatabase } from '../../support/migrated-database.js';

let database: MigratedDatabase;
let pool: Pool;

@Injectable()
class SameZoneSettle {
  @Cron('0 0 2 * * *', { name: 'adv90-nightly-same' })
  @IdempotentTask()
  async settle() {
    await pool.query(`INSERT INTO settlements (task, up_to) VALUES ('same', $1)`, [
      currentTick()!.slot,
    ]);
  }
}

@Injectable()
class MixedZoneSettle {
  @Cron('0 0 2 * * *', { name: 'adv90-nightly-mixed' })
  @IdempotentTask()
  async settle() {
    await pool.query(`INSERT INTO settlements (task, up_to) VALUES ('mixed', $1)`, [
      currentTick()!.slot,
    ]);
  }
}

const realNow = Date.now.bind(Date);

/** Calls `fire` as the replica's cron timer would at `atMs` (`Date.now()` reads it). */
async function firedAt(atMs: number, fire: () => Promise<unknown>): Promise<void> {
  Date.now = () => atMs + 50;
  try {
    await fire();
  } finally {
    Date.now = realNow;
  }
}

let rows: { task: string; up_to: Date }[] = [];

async function scenario() {
  @Module({
    imports: [ScheduleModule.forRoot(), IdempotencyModule.forRoot({ globalKeys: true, pool })],
    providers: [SameZoneSettle, MixedZoneSettle],
  })
  class AppModule {}
  const apps: Record<string, INestApplicationContext> = {};
  try {
    for (const [name, zone] of [
      ['utcA', 'UTC'],
      ['utcB', 'UTC'],
      ['kolkata', 'Asia/Kolkata'],
    ] as const) {
      const app = await NestFactory.createApplicationContext(AppModule, { logger: ['error'] });
      for (const job of app.get(SchedulerRegistry).getCronJobs().values()) {
        // Their timers simulated by hand (below).
        void job.stop();
        // The zone `cron` gives a schedule without `timeZone` as it makes it: the process's
        // (`Intl.DateTimeFormat().resolvedOptions().timeZone`, node_modules/cron/dist/time.js),
        // here set as a process of that zone has it (jest's process cannot change its own).
        (job.cronTime as { timeZone?: string }).timeZone = zone;
      }
      apps[name] = app;
    }
    // Last night's 02:00, as each zone reads it.
    const today = new Date(realNow());
    const utcNight = Date.UTC(
      today.getUTCFullYear(),
      today.getUTCMonth(),
      today.getUTCDate() - 1,
      2,
    );
    const istNight = utcNight - 5.5 * 3_600_000;
    // The control: both UTC replicas fire at 02:00Z.
    await firedAt(utcNight, () => apps.utcA.get(SameZoneSettle).settle());
    await firedAt(utcNight, () => apps.utcB.get(SameZoneSettle).settle());
    // The mixed fleet: the UTC replica at 02:00Z, the Kolkata one at 02:00 IST.
    await firedAt(utcNight, () => apps.utcA.get(MixedZoneSettle).settle());
    await firedAt(istNight, () => apps.kolkata.get(MixedZoneSettle).settle());
    const result = await pool.query<{ task: string; up_to: Date }>(
      'SELECT task, up_to FROM settlements ORDER BY id',
    );
    return result.rows;
  } finally {
    for (const app of Object.values(apps)) await app.close();
  }
}

describe('adversary 90: a @Cron() task on replicas in two process zones runs its night twice', () => {
  beforeAll(async () => {
    database = await createMigratedDatabase('adv90_cron_zones');
    pool = new Pool({ connectionString: database.url, max: 4 });
    await pool.query(
      'CREATE TABLE settlements (id serial PRIMARY KEY, task text NOT NULL, up_to timestamptz NOT NULL)',
    );
    rows = await scenario();
  }, 60_000);

  afterAll(async () => {
    Date.now = realNow;
    await pool?.end();
    await database?.drop();
  });

  it('control: two replicas in one zone settle the night once', () => {
    expect(rows.filter((row) => row.task === 'same')).toHaveLength(1);
  });

  it('two replicas in two zones settle the night once', () => {
    expect(rows.filter((row) => row.task === 'mixed').map((row) => row.up_to)).toHaveLength(1);
  });
});
