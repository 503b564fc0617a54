import 'reflect-metadata';
import { Injectable, type INestApplicationContext, Module } from '@nestjs/common';
import { NestFactory } from '@nestjs/core';
import { Interval, ScheduleModule } from '@nestjs/schedule';
import { Pool } from 'pg';
import { IdempotencyModule, IdempotentTask } from '../lib/index.js';
import { createMigratedDatabase, type MigratedDatabase } from './support/migrated-database.js';

/**
 * An `@IdempotentTask()` tick whose work leaves a statement running (one it gave up on, as
 * Kysely's default `'ignore query'` abort does) past its short lease: the tick's commit waits
 * for that statement, and the key's heartbeat renews the lease until the statement is done
 * (`heartbeatStop`, lib/claim/lease-renewals.ts). The same tick fired meanwhile (another
 * replica's timer, a slower one) skips it: the work runs once, one row kept. Before, the
 * heartbeat stopped when the work settled: the later timer took the tick over and ran it
 * again. The tick is fired by calling the method, as the schedule's timer does; its interval
 * (an hour) puts both calls in one slot.
 */
let pool: Pool;
let runs = 0;

@Injectable()
class SettlementTask {
  @IdempotentTask({ leaseMs: 1_000 })
  @Interval(3_600_000)
  async settle() {
    runs += 1;
    await pool.query('INSERT INTO settlements (note) VALUES ($1)', ['tick']);
    // Given up on after 100 ms and left running on the tick's connection: its commit waits.
    const slow = pool.query('SELECT pg_sleep(2.5)').catch(() => undefined);
    await Promise.race([slow, new Promise((resolve) => setTimeout(resolve, 100))]);
  }
}

describe('@IdempotentTask(): a tick that leaves a statement running past its lease (pool seam)', () => {
  let database: MigratedDatabase;
  let app: INestApplicationContext;

  beforeAll(async () => {
    database = await createMigratedDatabase('tasks_left_running');
    pool = new Pool({ connectionString: database.url, max: 6 });
    pool.on('error', () => undefined);
    await pool.query('CREATE TABLE settlements (note text NOT NULL)');
    @Module({
      imports: [
        ScheduleModule.forRoot(),
        IdempotencyModule.forRoot({ globalKeys: true, pool, databaseTimeoutMs: 3_000 }),
      ],
      providers: [SettlementTask],
    })
    class AppModule {}
    app = await NestFactory.createApplicationContext(AppModule, { logger: false });
  }, 60_000);

  afterAll(async () => {
    await app?.close();
    await pool?.end();
    await database?.drop();
  });

  it('the same tick fired meanwhile skips it: one run, one row', async () => {
    const task = app.get(SettlementTask);
    const first = task.settle().then(
      () => 'done',
      (error: Error) => error.message,
    );
    await new Promise((resolve) => setTimeout(resolve, 1_600)); // past one lease
    await task.settle();
    const firstTick = await first;
    const { rows } = await pool.query('SELECT 1 FROM settlements');
    expect({ first: firstTick, runs, rows: rows.length }).toEqual({
      first: 'done',
      runs: 1,
      rows: 1,
    });
  }, 30_000);
});
