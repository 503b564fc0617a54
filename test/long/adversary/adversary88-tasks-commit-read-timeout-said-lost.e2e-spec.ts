/**
 * Adversary 88: a tick whose COMMIT outlasts node-postgres' `query_timeout` (set on the app's
 * Pool, as the data-layers guide says to bound statements) COMMITS, and its record says done,
 * but the tick fails with "the tick of … did not commit, nothing of it was kept: Query read
 * timeout" (logged by `@nestjs/schedule` as an ERROR), and the library's log adds "The
 * idempotency store is unavailable; nothing was executed". An operator who believes it re-runs
 * the settlement by hand: the window settled twice.
 *
 * User code: the guide's settlement task on the pool seam (schedule.md: "The tick's
 * repositories, `dataSource.query()` and the pool seam's clients … join its transaction";
 * data-layers.md: `IdempotencyModule.forRoot({ globalKeys: true, pool })`), the Pool given a
 * `query_timeout` (400 ms here), the settlements table with a deferred constraint trigger
 * whose check takes a second at COMMIT (an ordinary `DEFERRABLE INITIALLY DEFERRED`
 * constraint trigger: a ledger balance check; here `pg_sleep(1)`). Two replicas (two Nest
 * apps on one database); the tick called by hand as its timer would (its interval timer
 * deleted from the SchedulerRegistry).
 *
 * Code path: lib/tasks/idempotent-tasks.service.ts `runSlot`: `commitAnswer` (lib/transaction/
 * commit-answer.ts) meets node-postgres' read timeout on the tick's COMMIT (the statement
 * runs on and commits on the server: lib/connection/read-timeout.ts says so), so `stored` is
 * not `TICK_DONE`; `runSlot` then throws `the tick of ${key} did not commit, nothing of it was
 * kept: ${detail}` and tries to keep that failure as the tick's answer (`keeps`), which fails
 * ("store unavailable … nothing was executed"). It never looks at the record, which its own
 * claim's COMMIT marked done.
 *
 * Docs quote (docs/guides/transactions.md): "node-postgres' `query_timeout` … answer 503
 * `store_unavailable` (the client stopped waiting or the connection is gone, so the outcome is
 * unknown …) … a COMMIT that was stalled on its way, or whose answer was lost, is the same
 * 503, and the retry runs the work or replays it"; docs/reference/problems.md: "a COMMIT whose
 * answer never came may have committed". The tick says the opposite: that it did not commit
 * and nothing was kept (schedule.md's rules have no row for a COMMIT whose answer was lost).
 *
 * Severity: medium (a misleading error: a committed tick reported as not committed, "nothing
 * of it was kept", at ERROR; the replicas themselves do not run it again).
 *
 * Fails now (the skipped case unskipped): the tick rejects with "the tick of
 * <slot> did not commit, nothing of it was kept: Query read timeout" while its row is in and its
 * record is `done` with its answer (200). Checked by running the file with `it.skip` turned
 * into `it` (1 failed, 2 passed).
 *
 * Control: the same task, trigger and replicas on a Pool without `query_timeout`: the tick
 * resolves, one row, and the other replica skips it.
 *
 * Suggested fix: where the COMMIT's outcome is unknown (a read timeout, a connection lost at
 * COMMIT), read the tick's record (fenced by its claim) before saying anything: done by this
 * claim, the tick committed (resolve, or log that its answer was late); else say that it may
 * have committed, as problems.md does for a request; never "nothing of it was kept".
 *
 * Fixed (session of 2026-12-06, third): where the tick's COMMIT's answer was lost
 * (`IdempotencyStoreUnavailableError`: a read timeout, a connection gone), `runSlot` reads its
 * record (`READ_TICK_RECORD`, `FOR SHARE NOWAIT`, read again while the COMMIT still holds the
 * row, up to its lease and 30 s) and decides by it (`tickOutcome`, lib/tasks/tick-outcome.ts):
 * done by its claim, the tick resolves, a warning saying its answer was late; still its claim's
 * and unfinished, the refused-COMMIT path as before ("did not commit" is then true); else it
 * fails saying it may have committed, storing nothing over its key (no "nothing was executed"
 * from a second commit). docs/guides/schedule.md's rules gain that row.
 */
import 'reflect-metadata';
import { Injectable, Module, type INestApplicationContext } from '@nestjs/common';
import { NestFactory } from '@nestjs/core';
import { Interval, ScheduleModule, SchedulerRegistry } from '@nestjs/schedule';
import { Pool } from 'pg';
import { currentTick, IdempotencyModule, IdempotentTask } from '../../../lib/index.js';
import { createMigratedDatabase, type MigratedDatabase } from '../../support/migrated-database.js';

let database: MigratedDatabase;
let check: Pool;
let appPool: Pool;

@Injectable()
class SettleTask {
  @IdempotentTask({ name: 'adv88-slow-commit' })
  @Interval(60_000)
  async settle() {
    await appPool.query('INSERT INTO settlements (slot) VALUES ($1)', [currentTick()!.slot]);
  }
}

/** Replica A ticks, then replica B (its timer firing later in the same minute). */
async function twoReplicas(queryTimeoutMs: number | undefined) {
  await check.query('TRUNCATE settlements');
  await check.query('DELETE FROM idempotency_keys');
  appPool = new Pool({ connectionString: database.url, max: 5, query_timeout: queryTimeoutMs });
  @Module({
    imports: [
      ScheduleModule.forRoot(),
      IdempotencyModule.forRoot({ globalKeys: true, pool: appPool }),
    ],
    providers: [SettleTask],
  })
  class AppModule {}
  const replicas: INestApplicationContext[] = [];
  try {
    // Not in a minute's last seconds: both ticks fall in one slot.
    if (Date.now() % 60_000 > 50_000) {
      await new Promise((resolve) => setTimeout(resolve, 60_500 - (Date.now() % 60_000)));
    }
    for (let i = 0; i < 2; i++) {
      const app = await NestFactory.createApplicationContext(AppModule, { logger: [] });
      const registry = app.get(SchedulerRegistry);
      for (const name of registry.getIntervals()) registry.deleteInterval(name);
      replicas.push(app);
    }
    const said = (replica: INestApplicationContext) =>
      replica
        .get(SettleTask)
        .settle()
        .then(
          () => 'ran',
          (error: Error) => `threw: ${error.message}`,
        );
    const first = await said(replicas[0]);
    // Its COMMIT (and its trigger's second) over.
    await new Promise((resolve) => setTimeout(resolve, 2_000));
    const second = await said(replicas[1]);
    const rows = await check.query<{ n: number }>('SELECT count(*)::int AS n FROM settlements');
    const record = await check.query<{ state: string; response_code: number }>(
      `SELECT state, response_code FROM idempotency_keys WHERE tenant_id = 'schedule:adv88-slow-commit'`,
    );
    return { first, second, rows: rows.rows[0].n, record: record.rows };
  } finally {
    for (const replica of replicas) await replica.close();
    await appPool.end();
  }
}

describe('adversary 88: a tick whose COMMIT outlasts query_timeout committed, and says it did not', () => {
  beforeAll(async () => {
    database = await createMigratedDatabase('adv88_tick_commit_read_timeout');
    check = new Pool({ connectionString: database.url, max: 4 });
    await check.query(
      'CREATE TABLE settlements (id serial PRIMARY KEY, slot timestamptz NOT NULL)',
    );
    await check.query(
      `CREATE FUNCTION settlement_check() RETURNS trigger LANGUAGE plpgsql AS $$
       BEGIN PERFORM pg_sleep(1); RETURN NULL; END $$`,
    );
    await check.query(
      `CREATE CONSTRAINT TRIGGER settlement_check AFTER INSERT ON settlements
       DEFERRABLE INITIALLY DEFERRED FOR EACH ROW EXECUTE FUNCTION settlement_check()`,
    );
  }, 60_000);

  afterAll(async () => {
    await check?.end();
    await database?.drop();
  });

  it('control: without query_timeout the tick runs and commits; the other replica skips it', async () => {
    expect(await twoReplicas(undefined)).toEqual({
      first: 'ran',
      second: 'ran',
      rows: 1,
      record: [{ state: 'done', response_code: 200 }],
    });
  }, 90_000);

  it('with query_timeout: the tick committed (its row in, its record done), and the other replica skips it', async () => {
    const seen = await twoReplicas(400);
    expect(seen).toMatchObject({
      second: 'ran',
      rows: 1,
      record: [{ state: 'done', response_code: 200 }],
    });
  }, 90_000);

  it('with query_timeout: the tick that committed does not say that nothing of it was kept', async () => {
    // Fails: first is "threw: the tick of <slot> did not commit, nothing of it was kept:
    // Query read timeout".
    const { first } = await twoReplicas(400);
    expect(first).not.toMatch(/did not commit|nothing of it was kept/);
  }, 90_000);
});
