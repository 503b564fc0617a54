/**
 * A replica for adversary 102's refused-tick test, in a process of its own: the adversary-60
 * worker (test/support/adv60-replica.ts: `createApplicationContext`, TypeORM, one
 * `@Cron(CRON, { name: 'import' })` + `@IdempotentTask()` task), whose tick prints
 * `begun <slot>` (as an email or an alert would go out), then copies rows as it streams them
 * (a write per streamed row on its manager), which the seam refuses (`cursor_open`); with
 * REFUSE=0 it reads them first, and succeeds.
 *
 * Env: DATABASE_URL; REPLICA; CRON (default every 2 seconds); REFUSE (default 1);
 * CLOCK_SKEW_MS: its clock that much off. Prints `ready` once its timers run.
 */
import 'reflect-metadata';
import { Injectable, Module } from '@nestjs/common';
import { NestFactory } from '@nestjs/core';
import { Cron, ScheduleModule } from '@nestjs/schedule';
import { TypeOrmModule } from '@nestjs/typeorm';
import { DataSource } from 'typeorm';
import {
  currentTick,
  IDEMPOTENCY_MIGRATIONS,
  IdempotencyModule,
  IdempotentTask,
} from '../../lib/index.js';

const env = process.env;
const replica = env.REPLICA ?? 'replica';

if (env.CLOCK_SKEW_MS) {
  const real = Date.now.bind(Date);
  const skew = Number(env.CLOCK_SKEW_MS);
  Date.now = () => real() + skew;
}

@Injectable()
class ImportTask {
  constructor(private readonly dataSource: DataSource) {}

  @Cron(env.CRON ?? '*/2 * * * * *', { name: 'import' })
  @IdempotentTask()
  async import() {
    const tick = currentTick()!;
    const slot = tick.slot.toISOString();
    console.log(`begun ${slot} ${replica}`);
    const m = this.dataSource.manager;
    const query = m
      .createQueryBuilder()
      .select('s.n', 'n')
      .from('(SELECT generate_series(1, 1000) AS n)', 's');
    if (env.REFUSE === '0') {
      const rows = await query.getRawMany<{ n: number }>();
      await m.query('INSERT INTO ticks (slot, replica, resumed) VALUES ($1, $2, $3)', [
        tick.slot,
        `${replica}:${rows.length}`,
        tick.resumed,
      ]);
      return;
    }
    const stream = await query.stream();
    for await (const row of stream as AsyncIterable<{ n: number }>) {
      await m.query('INSERT INTO ticks (slot, replica, resumed) VALUES ($1, $2, $3)', [
        tick.slot,
        `${replica}:${row.n}`,
        tick.resumed,
      ]);
    }
  }
}

@Module({
  imports: [
    ScheduleModule.forRoot(),
    TypeOrmModule.forRoot({
      type: 'postgres',
      url: env.DATABASE_URL,
      migrations: [...IDEMPOTENCY_MIGRATIONS],
      migrationsRun: true,
      logging: false,
    }),
    IdempotencyModule.forRoot({ globalKeys: true }),
  ],
  providers: [ImportTask],
})
class ReplicaModule {}

const app = await NestFactory.createApplicationContext(ReplicaModule, {
  logger: ['error', 'warn'],
});
app.enableShutdownHooks();
console.log('ready');
