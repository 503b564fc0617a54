/**
 * Adversary 73: every FRESH tick of a task is told `currentTick().resumed === true` when the
 * app's pg pool parses `bigint` as a number (node-postgres' `types` option on the Pool, or
 * `pg.defaults.parseInt8 = true`, which TypeORM's `parseInt8: true` sets), one of the most
 * common pg settings (counts and ids as numbers).
 *
 * The app: one replica, the pool seam (`IdempotencyModule.forRoot({ pool })`) given a Pool
 * whose `types.getTypeParser` reads INT8 (oid 20) with `Number`. One task on
 * `@Cron('0 0 0 1 1 *', { name, disabled: true })`, fired by hand (`fireOnTick()`): its first
 * and only run of the slot records `currentTick().resumed`.
 *
 * Why: the round-72 fix reads a takeover from the claim's fencing token as a string,
 * `resumed: resuming || claimed.claim.lockVersion !== '0'` (`runSlot`,
 * lib/tasks/idempotent-tasks.service.ts). `lock_version` is a `bigint`; the claim's row comes
 * back through the app's pool (`claimOutcome`, lib/claim/postgres-claim.store.ts: `lockVersion:
 * row.lock_version`, not normalized), as the number 0 under such a pool: `0 !== '0'` is true.
 * (Every other use of the token goes through `BigInt()`, `Number()` or a query parameter,
 * which take both.)
 *
 * Expected (docs/guides/schedule.md): "`currentTick()` inside the method gives `{ task, slot,
 * resumed }`"; `resumed` is true for a tick that "dies with its replica ... a later tick of
 * the task ... resumes it after its last completed phase ... and `currentTick().resumed` is
 * true" (lib/tasks/task-tick.ts: "Whether this run resumes a tick left unfinished"). A tick
 * run for the first time is not resumed.
 *
 * Control: the same tick on a default Pool (INT8 as text) is told `resumed: false`.
 *
 * Severity: medium (code that branches on `resumed` to reconcile half-done work, the flag's
 * purpose, does so on every tick: a reconciliation, an alert or a "recovered" metric per
 * tick; code that skips work on a resumed tick skips it always).
 *
 * Fails now: 'resumed true' on the first run of a fresh slot; control passes.
 *
 * Fixed: the fencing token is compared as a number (`Number(lockVersion) !== 0`).
 */
import 'reflect-metadata';
import { Injectable, Module } from '@nestjs/common';
import { NestFactory } from '@nestjs/core';
import { Cron, ScheduleModule, SchedulerRegistry } from '@nestjs/schedule';
import { Pool, types } from 'pg';
import { currentTick, IdempotencyModule, IdempotentTask } from '../../../lib/index.js';
import { createMigratedDatabase, type MigratedDatabase } from '../../support/migrated-database.js';

let database: MigratedDatabase;
const runs: boolean[] = [];

function taskClass(name: string) {
  @Injectable()
  class Settle {
    @Cron('0 0 0 1 1 *', { name, disabled: true })
    @IdempotentTask({ name })
    async settle() {
      runs.push(currentTick()!.resumed);
    }
  }
  return Settle;
}

async function runOnce(name: string, pool: Pool): Promise<boolean[]> {
  runs.length = 0;
  const provider = taskClass(name);
  @Module({
    imports: [ScheduleModule.forRoot(), IdempotencyModule.forRoot({ globalKeys: true, pool })],
    providers: [provider],
  })
  class AppModule {}
  const app = await NestFactory.createApplicationContext(AppModule, { logger: false });
  await app.init();
  try {
    await app.get(SchedulerRegistry).getCronJob(name).fireOnTick();
    for (let i = 0; i < 50 && runs.length === 0; i++) {
      await new Promise((resolve) => setTimeout(resolve, 100));
    }
    return [...runs];
  } finally {
    await app.close();
    await pool.end();
  }
}

describe('adversary 73: resumed on a pool that reads bigint as a number', () => {
  beforeAll(async () => {
    database = await createMigratedDatabase('adv73_resumed_int8');
  }, 60_000);

  afterAll(async () => {
    await database?.drop();
  });

  it('control: a default pool, the first run of a slot is not resumed', async () => {
    const pool = new Pool({ connectionString: database.url, max: 4 });
    expect((await runOnce('adv73-control', pool)).map((r) => `resumed ${r}`)).toEqual([
      'resumed false',
    ]);
  }, 60_000);

  it('a pool with INT8 as Number: the first run of a slot is not resumed', async () => {
    const pool = new Pool({
      connectionString: database.url,
      max: 4,
      types: {
        getTypeParser: ((oid: number, format?: 'text' | 'binary') =>
          oid === 20 ? Number : types.getTypeParser(oid, format as 'text')) as never,
      },
    });
    // Fails: ['resumed true'] (lockVersion 0, a number, !== '0').
    expect((await runOnce('adv73-int8', pool)).map((r) => `resumed ${r}`)).toEqual([
      'resumed false',
    ]);
  }, 60_000);
});
