/**
 * Adversary 87: a tick's TypeORM `dataSource.query()` left unawaited (fire and forget) is lost:
 * it fails with "TypeError: Cannot read properties of undefined (reading 'query')" and never
 * runs, neither in the tick's transaction nor on its own, though the tick committed.
 *
 * User code: the schedule guide's app (ScheduleModule, TypeOrmModule.forRoot, IdempotencyModule
 * .forRoot({ globalKeys: true })); an `@Interval()` task under `@IdempotentTask()` that inserts
 * a row with `dataSource.query()` awaited, then starts a second `dataSource.query()` (a slow
 * `INSERT ... SELECT ... FROM pg_sleep(0.5)`) without awaiting it, a `.catch()` logging its
 * failure, and returns.
 *
 * Code path: lib/tasks/idempotent-tasks.service.ts (the tick's transaction scope), the TypeORM
 * seam (lib/transaction/transaction-scope.ts joiningCreateQueryRunner, lib/data-layers/
 * lazy-transaction.ts: `DataSource.query` routed to the tick's query runner), the
 * transaction's `afterCodeStatements` wait and lib/claim/lease-renewals.ts `heartbeatStop`
 * ('after-code-statements'): the statement is started on the tick's runner, which is gone by
 * the time TypeORM sends it (its `databaseConnection` undefined), so it is never "left running"
 * for the commit to wait for, and it is not handed a connection of its own either.
 *
 * Docs quote (docs/guides/transactions.md, "Database work belongs before the answer"): "Work a
 * handler starts and does not await [...] joins the request's transaction while it is open.
 * Once the answer has committed, such work runs on its own, as it would without the library
 * [...] A statement of its code still running on the request's connection when the handler
 * answers (one not awaited, ...) runs to its end, and the stored answer and `COMMIT` are sent
 * after it: what it wrote commits with the answer [...] on a route, a GraphQL field, a BullMQ
 * job and a scheduled tick alike"; docs/guides/data-layers.md: "After the answer committed,
 * work the handler left running (a promise it did not await) runs on its own".
 *
 * Severity: high (a write of the tick's silently lost: the tick's record says done, its
 * "fire and forget" statement never ran, on every tick; the app sees only its own `.catch()`
 * with a TypeError that names no cause).
 *
 * Failed before the fix: rows ['a'] (expected ['a', 'b']); the left statement rejects with QueryFailedError
 * "TypeError: Cannot read properties of undefined (reading 'query')".
 *
 * Control: the same task without `@IdempotentTask()`: rows ['a', 'b'].
 *
 * Fixed (session of 2026-12-06, third): a statement TypeORM's `query()` was asked for while the
 * transaction was open, that reaches its `connect()` only after the end, runs apart once the
 * answer committed (refused after a rollback), as work started after the answer does
 * (lib/data-layers/lazy-transaction.ts, `queryFrom`'s `send`). HTTP routes are guarded by the
 * same change (test/transaction-seam.e2e-spec.ts, "-1: before, not awaited").
 *
 * Suggested fix: a TypeORM statement started in the tick's scope must be sent on the tick's
 * runner at once (tracked by `afterCodeStatements`, COMMIT behind it), or, once the tick's
 * runner is released, on a runner of its own (as the docs say of work past the end), never on
 * the released runner.
 */
import 'reflect-metadata';
import { Injectable, Module } from '@nestjs/common';
import { NestFactory } from '@nestjs/core';
import { Interval, ScheduleModule } from '@nestjs/schedule';
import { InjectDataSource, TypeOrmModule } from '@nestjs/typeorm';
import { Pool } from 'pg';
import { type DataSource } from 'typeorm';
import { IdempotencyModule, IdempotentTask } from '../../../lib/index.js';
import { createMigratedDatabase, type MigratedDatabase } from '../../support/migrated-database.js';

let database: MigratedDatabase;
let pool: Pool;
let armed: { label: string; failures: string[] } | undefined;

async function tick(dataSource: DataSource) {
  if (!armed) return;
  const { label, failures } = armed;
  armed = undefined;
  await dataSource.query(`INSERT INTO ticks (label, n) VALUES ($1, 'a')`, [label]);
  // fire and forget: a slow write the tick does not wait for
  dataSource
    .query(`INSERT INTO ticks (label, n) SELECT $1, 'b' FROM pg_sleep(0.5)`, [label])
    .catch((error: Error) => failures.push(`${error.name}: ${error.message}`));
}

@Injectable()
class KeyedTask {
  constructor(@InjectDataSource() private readonly dataSource: DataSource) {}

  @IdempotentTask({ name: 'adv87-unawaited' })
  @Interval('adv87-unawaited', 200)
  async run() {
    await tick(this.dataSource);
  }
}

@Injectable()
class PlainTask {
  constructor(@InjectDataSource() private readonly dataSource: DataSource) {}

  @Interval('adv87-unawaited-plain', 200)
  async run() {
    await tick(this.dataSource);
  }
}

async function oneArmedTick(keyed: boolean) {
  const label = keyed ? 'keyed' : 'plain';
  @Module({
    imports: [
      ScheduleModule.forRoot(),
      TypeOrmModule.forRoot({ type: 'postgres', url: database.url }),
      IdempotencyModule.forRoot({ globalKeys: true }),
    ],
    providers: [keyed ? KeyedTask : PlainTask],
  })
  class AppModule {}
  const app = await NestFactory.createApplicationContext(AppModule, { logger: ['error'] });
  await app.init();
  const failures: string[] = [];
  armed = { label, failures };
  let rows: string[] = [];
  try {
    // Until the left statement wrote its row, or failed, or 10 s passed.
    const deadline = Date.now() + 10_000;
    while (Date.now() < deadline) {
      const found = await pool.query<{ n: string }>(
        'SELECT n FROM ticks WHERE label = $1 ORDER BY n',
        [label],
      );
      rows = found.rows.map((row) => row.n);
      if (rows.includes('b') || failures.length > 0) break;
      await new Promise((resolve) => setTimeout(resolve, 100));
    }
  } finally {
    await app.close();
  }
  return { rows, failures };
}

describe('adversary 87: a tick leaves a TypeORM query unawaited', () => {
  beforeAll(async () => {
    database = await createMigratedDatabase('adv87_tick_unawaited_query');
    pool = new Pool({ connectionString: database.url, max: 4 });
    await pool.query('CREATE TABLE ticks (label text NOT NULL, n text NOT NULL)');
  }, 60_000);

  afterAll(async () => {
    await pool?.end();
    await database?.drop();
  });

  it('control: without the library, the left query runs and writes its row', async () => {
    expect(await oneArmedTick(false)).toEqual({ rows: ['a', 'b'], failures: [] });
  }, 30_000);

  it('with @IdempotentTask(), the left query runs and writes its row', async () => {
    expect(await oneArmedTick(true)).toEqual({ rows: ['a', 'b'], failures: [] });
  }, 30_000);
});
