/**
 * Fixed (session of 2026-12-06 fourth): a tick's hold is written by the statement that marks its
 * record done, in the tick's own COMMIT (COMPLETE_HELD: `finished_at = greatest(clock_timestamp(),
 * <slot end + a minute - retention>)`, from the claim's `finishedAtLeastMs`): a tick done, a
 * failure kept as its answer, a resumed tick and a lost COMMIT found committed all carry it;
 * no statement follows the COMMIT to be lost.
 *
 * Adversary 90: a tick's record is kept past its slot's end by a second statement sent AFTER
 * the tick's COMMIT (`holdRecord`, HOLD_TICK_RECORD). Where that statement does not land (the
 * connection drops right after the COMMIT, a failover, the replica killed between the two), the
 * record goes `retentionMs` after it finished, though its slot is still current: the purge
 * deletes it, and the next replica whose timer fires in the same window runs the slot again.
 * The window is settled twice; the only trace is a warning ("it goes retentionMs after it
 * finished").
 *
 * User code: the guide's settlement task (schedule.md: `@Interval()` + `@IdempotentTask()`
 * inserting a row for `currentTick()!.slot`), its interval longer than its retention (the
 * guide's own case: "a weekly `@Interval()` under the default 24 h", where replicas started
 * on different days fire on different days of the week; here scaled: 20 s windows,
 * `retentionMs: 2_000`), the purge running (`purgeIntervalMs`; here
 * `IdempotencyPurger.purgeExpired()` called), two replicas (two Nest apps on one database),
 * their timers simulated by calling the method (the real timers deleted from the registry).
 * The fault between the COMMIT and the hold is stood in for by a trigger that fails the hold's
 * UPDATE of that task's record (as a connection lost after the COMMIT fails it).
 *
 * Code path: lib/tasks/idempotent-tasks.service.ts `runSlot`: `commitAnswer(… TICK_DONE …)`
 * commits the record done with `finished_at = now`, THEN `holdRecord` sends HOLD_TICK_RECORD
 * (lib/claim/postgres-statements.ts) on its own; its failure is caught and logged as a warning.
 * PURGE_BATCH then deletes the record `retentionMs` after the COMMIT; the next tick of the slot
 * finds no record and claims it afresh.
 *
 * Docs quote (docs/guides/schedule.md, "The rules"): "runs and commits | done: its record kept
 * for `retentionMs`, as a request's, and at least until its slot ends (its interval's window,
 * its cron's next time) and a minute after: a replica whose timer fires late in the window, or
 * whose clock is behind the database's by up to a minute, or a call by hand, still finds it,
 * however short the retention (a weekly `@Interval()` under the default 24 h)"; and "meets a
 * database that fails | skipped, logged; the next tick runs" (a passing failure, never a tick
 * run twice).
 *
 * Severity: high by the rubric (a tick's effect twice: the week settled twice), needing a
 * passing fault in the one round trip after the COMMIT, and a task sparser than its retention
 * (the guide's weekly example: the other replicas' timers fire days later in the same window).
 *
 * Fails now (the skipped case unskipped): the 'cut' task's rows of the window are ['A', 'B'],
 * expected ['A']: replica B ran the window again after the purge (the control's task, whose
 * hold landed, has one row).
 *
 * Control: the same two replicas, the same purge, the hold not failed: B finds the record done
 * and skips the slot (one row).
 *
 * Suggested fix: keep the hold in the tick's own COMMIT: the statement that marks the record
 * done (finishIn, for a tick) sets `finished_at = greatest(clock_timestamp(), <slot end + a
 * minute - retention>)`, so that the record is never done without its hold; the same for a
 * tick's failure kept as its answer and for a resumed tick.
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
const RETENTION_MS = 2_000;

let database: MigratedDatabase;
let pool: Pool;
/** Which replica ticks now (the row it writes). */
let replica = 'A';

@Injectable()
class WholeSettle {
  @IdempotentTask({ name: 'adv90-whole' })
  @Interval(EVERY_MS)
  async settle() {
    await pool.query(`INSERT INTO settlements (task, slot, by) VALUES ('whole', $1, $2)`, [
      currentTick()!.slot,
      replica,
    ]);
  }
}

@Injectable()
class CutSettle {
  @IdempotentTask({ name: 'adv90-cut' })
  @Interval(EVERY_MS)
  async settle() {
    await pool.query(`INSERT INTO settlements (task, slot, by) VALUES ('cut', $1, $2)`, [
      currentTick()!.slot,
      replica,
    ]);
  }
}

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

let rowsOfWindow: { task: string; by: string }[] = [];

/**
 * Early in a window, replica A ticks both tasks ('cut': the hold after its COMMIT fails). Past
 * the retention the purge runs; then replica B's timers fire, still in the window.
 */
async function scenario() {
  @Module({
    imports: [
      ScheduleModule.forRoot(),
      IdempotencyModule.forRoot({ globalKeys: true, pool, retentionMs: RETENTION_MS }),
    ],
    providers: [WholeSettle, CutSettle],
  })
  class AppModule {}
  const replicas: INestApplicationContext[] = [];
  try {
    for (let i = 0; i < 2; i++) {
      const app = await NestFactory.createApplicationContext(AppModule, { logger: ['error'] });
      const registry = app.get(SchedulerRegistry);
      for (const name of registry.getIntervals()) registry.deleteInterval(name);
      replicas.push(app);
    }
    const intoWindow = Date.now() % EVERY_MS;
    if (intoWindow > 300) await sleep(EVERY_MS - intoWindow + 200);
    const window = Math.floor(Date.now() / EVERY_MS) * EVERY_MS;
    replica = 'A';
    await replicas[0].get(WholeSettle).settle();
    await replicas[0].get(CutSettle).settle();
    await sleep(RETENTION_MS + 2_000);
    await replicas[0].get(IdempotencyPurger).purgeExpired();
    replica = 'B';
    await replicas[1].get(WholeSettle).settle();
    await replicas[1].get(CutSettle).settle();
    // Both of B's timers fired in A's window.
    expect(Date.now()).toBeLessThan(window + EVERY_MS);
    const { rows } = await pool.query<{ task: string; by: string }>(
      'SELECT task, by FROM settlements WHERE slot = $1 ORDER BY id',
      [new Date(window)],
    );
    return rows;
  } finally {
    for (const app of replicas) await app.close();
  }
}

describe('adversary 90: a tick whose hold after its COMMIT is lost is purged in its slot and run again', () => {
  beforeAll(async () => {
    database = await createMigratedDatabase('adv90_hold_after_commit');
    pool = new Pool({ connectionString: database.url, max: 4 });
    await pool.query(
      'CREATE TABLE settlements (id serial PRIMARY KEY, task text NOT NULL, slot timestamptz NOT NULL, by text NOT NULL)',
    );
    // The connection lost right after the 'cut' tick's COMMIT: its hold does not land.
    await pool.query(`
      CREATE FUNCTION adv90_lost_hold() RETURNS trigger LANGUAGE plpgsql AS $$
      BEGIN
        RAISE EXCEPTION 'Connection terminated unexpectedly';
      END $$`);
    await pool.query(`
      CREATE TRIGGER adv90_lost_hold BEFORE UPDATE ON idempotency_keys FOR EACH ROW
      WHEN (OLD.tenant_id = 'schedule:adv90-cut' AND OLD.state = 'done'
        AND NEW.finished_at > OLD.finished_at)
      EXECUTE FUNCTION adv90_lost_hold()`);
    rowsOfWindow = await scenario();
  }, 90_000);

  afterAll(async () => {
    await pool?.end();
    await database?.drop();
  });

  it('control: its hold landed, its record outlasts the purge; replica B skips the slot', () => {
    expect(rowsOfWindow.filter((row) => row.task === 'whole').map((row) => row.by)).toEqual(['A']);
  });

  it('its hold after the COMMIT lost, the slot is still run once', () => {
    expect(rowsOfWindow.filter((row) => row.task === 'cut').map((row) => row.by)).toEqual(['A']);
  });
});
