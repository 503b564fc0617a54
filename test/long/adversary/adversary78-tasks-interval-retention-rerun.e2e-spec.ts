/**
 * Adversary 78: an `@Interval()` task whose period is longer than the module's `retentionMs`
 * runs one window's tick TWICE across two replicas: the first replica's tick finishes, the
 * purge deletes its record (finished more than `retentionMs` ago), and the second replica,
 * whose timer fires later in the same window (replicas start their timers at different
 * moments), finds no key for the slot and runs it again.
 *
 * The user code: the docs' worker, two replicas, one task
 * `@Interval('sync', PERIOD) @IdempotentTask()` that inserts the tick's row (its effect); the
 * module's `retentionMs` set for the app's HTTP keys (here 1 s standing for, say, an API's
 * 1 h retention and a worker's `@Interval('reconcile', 6 * 3_600_000)`), the purge running
 * (`purgeIntervalMs`, here `IdempotencyPurger.purgeExpired()` called between the two
 * replicas' timers). The second replica started 3 s after the first, both timers' ticks
 * falling in one 8 s window.
 *
 * Why it breaks: a tick's record is kept as a request's (lib/tasks/idempotent-tasks.service.ts
 * `runSlot` stores TICK_DONE through `commitAnswer`), and the purge (PURGE_BATCH,
 * lib/claim/postgres-statements.ts) deletes it `retentionMs` after it finished, whatever the
 * task's period. An `@Interval()` window's replicas fire anywhere within the period
 * (lib/tasks/task-slot.ts `intervalSlot`: "Replicas start their timers at different times;
 * every tick that fires within one window is that window's tick"), so a window wider than the
 * retention outlives its tick's record; the late replica's claim then inserts the slot's key
 * anew and runs the tick.
 *
 * The docs it contradicts: docs/guides/schedule.md, "The rules": "fires on several replicas |
 * one runs it (the first to claim its slot); the others skip it, and so does a replica whose
 * timer fires after it is done"; "`@Interval(ms)`: ... Replicas start their timers at
 * different moments; the first tick of each window runs." Nothing says the task's period must
 * be within `retentionMs` (the retention's docs speak of "the clients' retry horizon").
 *
 * Severity: medium, toward high (the tick's effects twice, the library's whole promise for
 * tasks; needs an interval longer than the retention: with the DEFAULT 24 h, any `@Interval()`
 * over a day, a weekly `@Interval('cleanup', 7 * 86_400_000)` (Node keeps up to 24.8 days), on
 * replicas started on different days; with a 1 h retention, a 6-hourly task).
 *
 * Fails now: the window's slot has two rows, one per replica.
 *
 * Control: the same two replicas and purge with the default `retentionMs` (24 h): one row; the
 * second replica skips the tick.
 *
 * Suggested fix: keep a tick's record at least one period of its task (the purge leaves
 * `schedule:` keys finished within the longest period, or the tick's record carries its own
 * expiry: `retentionMs` or the period, whichever is longer); or refuse at start-up an
 * `@Interval()` whose period exceeds `retentionMs`, saying so (and the same for a cron whose
 * replicas' clocks may differ by more: not needed there).
 * Fixed: a tick's record is kept until its slot ends (its interval's window, its cron's next
 * time): after the tick commits its record (or its failure), lib/tasks/idempotent-tasks.service.ts
 * `holdRecord` moves its `finished_at` to the slot's end less `retentionMs` where that is later
 * (lib/tasks/task-slot.ts `tickRecordFinishedAt`, a pure decision; HOLD_TICK_RECORD in
 * lib/claim/postgres-statements.ts; the slot's end from lib/tasks/task-schedule.ts
 * `cronTimeSlotEnd` for a cron), so the purge, wherever it runs, keeps it while the slot is
 * current. docs/guides/schedule.md says so.
 */
import 'reflect-metadata';
import { Inject, Injectable, Module, type INestApplicationContext } from '@nestjs/common';
import { NestFactory } from '@nestjs/core';
import { Interval, ScheduleModule } from '@nestjs/schedule';
import { Pool } from 'pg';
import {
  currentTick,
  IdempotencyModule,
  IdempotencyPurger,
  IdempotentTask,
} from '../../../lib/index.js';
import { createMigratedDatabase, type MigratedDatabase } from '../../support/migrated-database.js';

const PERIOD_MS = 8_000;
const REPLICA = 'REPLICA';

let database: MigratedDatabase;
let pool: Pool;

@Injectable()
class SyncTask {
  constructor(@Inject(REPLICA) private readonly replica: string) {}

  @Interval('sync', PERIOD_MS)
  @IdempotentTask()
  async sync() {
    await pool.query('INSERT INTO ticks (slot, replica) VALUES ($1, $2)', [
      currentTick()!.slot,
      this.replica,
    ]);
  }
}

function startReplica(name: string, retention: object): Promise<INestApplicationContext> {
  @Module({
    imports: [
      ScheduleModule.forRoot(),
      IdempotencyModule.forRoot({ globalKeys: true, pool, ...retention }),
    ],
    providers: [SyncTask, { provide: REPLICA, useValue: name }],
  })
  class ReplicaModule {}
  return NestFactory.createApplicationContext(ReplicaModule, { logger: ['error'] });
}

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

/** Two replicas 3 s apart in one window, the purge run between their ticks: the rows per slot. */
async function twoReplicasOneWindow(retention: object) {
  await pool.query('TRUNCATE ticks');
  await pool.query('DELETE FROM idempotency_keys');
  // Start early in a window, so that both replicas' first ticks fall in the next one.
  while (Date.now() % PERIOD_MS < 200 || Date.now() % PERIOD_MS > 1_200) await sleep(50);
  const apps: INestApplicationContext[] = [];
  try {
    apps.push(await startReplica('a', retention));
    const startedA = Date.now();
    await sleep(3_000);
    apps.push(await startReplica('b', retention));
    // The first replica's tick has run (and finished over a second ago): the purge runs.
    while (Date.now() < startedA + PERIOD_MS + 1_500) await sleep(50);
    await apps[0].get(IdempotencyPurger).purgeExpired();
    // The second replica's timer fires, in the same window.
    while (Date.now() < startedA + PERIOD_MS + 4_500) await sleep(50);
    const { rows } = await pool.query<{ slot: Date; replicas: string[] }>(
      `SELECT slot, array_agg(replica ORDER BY id) AS replicas FROM ticks GROUP BY slot
       ORDER BY slot`,
    );
    return rows.map((row) => ({ slot: row.slot.toISOString(), replicas: row.replicas }));
  } finally {
    await Promise.all(apps.map((app) => app.close()));
  }
}

describe('adversary 78: an @Interval() longer than retentionMs, two replicas', () => {
  beforeAll(async () => {
    database = await createMigratedDatabase('adv78_interval_retention');
    pool = new Pool({ connectionString: database.url, max: 8 });
    await pool.query(
      'CREATE TABLE ticks (id serial PRIMARY KEY, slot timestamptz NOT NULL, replica text NOT NULL)',
    );
  }, 60_000);

  afterAll(async () => {
    await pool?.end();
    await database?.drop();
  });

  it('control: the default retentionMs; the window runs once, the second replica skips it', async () => {
    const slots = await twoReplicasOneWindow({});
    expect(slots).toHaveLength(1);
    expect(slots[0].replicas).toEqual(['a']);
  }, 60_000);

  // Fixed (round 78 fixer)
  it('retentionMs 1 s under an 8 s interval: the window still runs once', async () => {
    const slots = await twoReplicasOneWindow({ retentionMs: 1_000 });
    expect(slots).toHaveLength(1);
    // Fails: ['a', 'b']: the first tick's record purged, the second replica ran the slot again.
    expect(slots[0].replicas).toEqual(['a']);
  }, 60_000);
});
