/**
 * Adversary 88: a tick RESUMED by a later tick (its first run threw after a `PhaseRunner`
 * call out committed) is not kept past its slot's end: under a short retention the purge
 * deletes its record at once, and a replica whose clock is a few seconds behind, firing in the
 * slot by its clock, claims the slot afresh: the call out is made again under a NEW derived
 * key (the PSP charges twice) and the window's row is written twice.
 *
 * User code: the guide's settlement task with a call out (schedule.md, "Calls out:
 * `PhaseRunner`"): `@Interval(4000) @IdempotentTask() settle()` that calls the PSP through
 * `phases.call('psp_settled', ({ idempotencyKey }) => …)`, then inserts a row for
 * `currentTick()!.slot`; its first run fails after the call (the PSP answered, a bug or a
 * passing fault after it), so the next tick resumes it ("A tick that throws after a phase of
 * it committed keeps its key and phases instead, and a later tick resumes it"). Module as in
 * adversary 82: `IdempotencyModule.forRoot({ globalKeys: true, pool, retentionMs: 1000 })`
 * (a short retention, scaled: "however short the retention"), the purge called
 * (`IdempotencyPurger.purgeExpired()`, as `purgeIntervalMs` runs it); two replicas (two Nest
 * apps on one database); replica B's clock 5 s behind; timers simulated by calling the method
 * with `Date.now()` reading the replica's clock (adversaries 80, 82), the apps' real interval
 * timers deleted from the SchedulerRegistry.
 *
 * Code path: lib/tasks/idempotent-tasks.service.ts `resumeLeftovers` calls
 * `runSlot(task, key, true, work)` WITHOUT `slotEndMs`, so `holdRecord` →
 * `tickRecordFinishedAt(undefined, …)` (lib/tasks/task-slot.ts) keeps nothing: the resumed
 * tick's `finished_at` is when it was resumed, and PURGE_BATCH deletes it `retentionMs` later,
 * where a tick run in its own slot is held to `slotEnd + CLOCK_SKEW_MS`.
 *
 * Docs quote (docs/guides/schedule.md, "The rules"): "runs and commits | done: its record kept
 * for `retentionMs`, as a request's, and at least until its slot ends (its interval's window,
 * its cron's next time) and a minute after: a replica whose timer fires late in the window, or
 * whose clock is behind the database's by up to a minute, or a call by hand, still finds it,
 * however short the retention"; "dies with its replica ... a later tick of the task, on any
 * replica, resumes it after its last completed phase: a call out it made is not made again".
 *
 * Severity: medium (a call out made twice, under two derived keys, and the window's work done
 * twice; needs a retention under about a minute plus the resumed tick's slot end, a replica
 * clock behind, and the purge in the gap).
 *
 * Fails now (the skipped case unskipped): the slot's rows are ['resumed', 'fresh'] and the
 * PSP saw two calls for the slot, under two keys (expected one row, one call). Checked by
 * running the file with `it.skip` turned into `it` (1 failed, 1 passed, 18 s).
 *
 * Control: the same replicas, clocks and ticks, no purge between the resume and B's tick: B
 * finds the slot done (one row, one call).
 *
 * Suggested fix: hold a resumed tick's record as a tick in its own slot is held: pass the
 * slot's end to `runSlot` from `resumeLeftovers` (the slot's end by its schedule,
 * `slotOf`/`cronTimeSlotEnd`, or, for an `@Interval()`, `slot + period`).
 *
 * Fixed (session of 2026-12-06, third): `resumeLeftovers` passes each resumed slot's end to
 * `runSlot` (`slotEndOf`: the slot plus the interval's period as it runs now, or the cron's
 * next time after it), so its record is held past its slot as its own tick's is
 * (lib/tasks/idempotent-tasks.service.ts).
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
  PhaseRunner,
} from '../../../lib/index.js';
import { createMigratedDatabase, type MigratedDatabase } from '../../support/migrated-database.js';

const EVERY_MS = 4_000;
const RETENTION_MS = 1_000;
/** How far replica B's clock is behind the real (and the database's) clock. */
const BEHIND_MS = 5_000;

let database: MigratedDatabase;
let pool: Pool;
/** The PSP's calls: the slot each was for, and its idempotency key. */
const pspCalls: { slot: string; key: string }[] = [];
/** The first run of the first slot fails after its call out. */
let failFirstRun = true;

@Injectable()
class SettleTask {
  constructor(private readonly phases: PhaseRunner) {}

  @Interval(EVERY_MS)
  @IdempotentTask({ name: 'adv88-resumed-settle' })
  async settle() {
    const tick = currentTick()!;
    await this.phases.call('psp_settled', async ({ idempotencyKey }) => {
      pspCalls.push({ slot: tick.slot.toISOString(), key: idempotencyKey });
      return { settled: true };
    });
    if (failFirstRun) {
      failFirstRun = false;
      throw new Error('the ledger service answered 502 after the PSP settled');
    }
    await pool.query('INSERT INTO settlements (slot, how) VALUES ($1, $2)', [
      tick.slot,
      tick.resumed ? 'resumed' : 'fresh',
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

/**
 * Replica A ticks early in a window (its run fails after the call out), then early in the next
 * window (that tick resumes the first); the purge runs (or not); then replica B, its clock 5 s
 * behind and so in the first window, ticks.
 */
async function twoReplicas(purgeBetween: boolean) {
  await pool.query('TRUNCATE settlements');
  await pool.query('DELETE FROM idempotency_keys');
  pspCalls.length = 0;
  failFirstRun = true;
  @Module({
    imports: [
      ScheduleModule.forRoot(),
      IdempotencyModule.forRoot({ globalKeys: true, pool, retentionMs: RETENTION_MS }),
    ],
    providers: [SettleTask],
  })
  class AppModule {}
  const replicas: INestApplicationContext[] = [];
  try {
    for (let i = 0; i < 2; i++) {
      const app = await NestFactory.createApplicationContext(AppModule, { logger: [] });
      const registry = app.get(SchedulerRegistry);
      for (const name of registry.getIntervals()) registry.deleteInterval(name);
      replicas.push(app);
    }
    const intoWindow = realNow() % EVERY_MS;
    if (intoWindow > 300) await sleep(EVERY_MS - intoWindow + 100);
    const window = Math.floor(realNow() / EVERY_MS) * EVERY_MS;
    await expect(replicas[0].get(SettleTask).settle()).rejects.toThrow('502');
    // The next window's tick on A: its own slot, then the first one resumed.
    await sleep(window + EVERY_MS + 200 - realNow());
    await replicas[0].get(SettleTask).settle();
    await sleep(window + EVERY_MS + 2_300 - realNow());
    if (purgeBetween) await replicas[0].get(IdempotencyPurger).purgeExpired();
    // B's clock reads 2.7 s before the first window's end: its timer fires in it.
    expect(realNow() - BEHIND_MS).toBeLessThan(window + EVERY_MS);
    await onClock(-BEHIND_MS, () => replicas[1].get(SettleTask).settle());
    const first = new Date(window).toISOString();
    const { rows } = await pool.query<{ how: string }>(
      'SELECT how FROM settlements WHERE slot = $1 ORDER BY id',
      [new Date(window)],
    );
    return {
      rows: rows.map((row) => row.how),
      pspKeys: new Set(pspCalls.filter((call) => call.slot === first).map((call) => call.key)).size,
    };
  } finally {
    for (const replica of replicas) await replica.close();
  }
}

describe('adversary 88: a resumed tick is not held past its slot; a replica behind runs it again', () => {
  beforeAll(async () => {
    database = await createMigratedDatabase('adv88_resumed_not_held');
    pool = new Pool({ connectionString: database.url, max: 6 });
    await pool.query(
      'CREATE TABLE settlements (id serial PRIMARY KEY, slot timestamptz NOT NULL, how text NOT NULL)',
    );
  }, 60_000);

  afterAll(async () => {
    Date.now = realNow;
    await pool?.end();
    await database?.drop();
  });

  it('control: no purge between the resume and the slow replica; it finds the slot done', async () => {
    expect(await twoReplicas(false)).toEqual({ rows: ['resumed'], pspKeys: 1 });
  }, 60_000);

  it('the purge after the resume: the slow replica still finds the slot done, the PSP called once', async () => {
    // Fails: { rows: ['resumed', 'fresh'], pspKeys: 2 }.
    expect(await twoReplicas(true)).toEqual({ rows: ['resumed'], pspKeys: 1 });
  }, 60_000);
});
