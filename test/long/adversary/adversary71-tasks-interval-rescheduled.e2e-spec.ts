/**
 * Adversary 71: an `@Interval()` task rescheduled at runtime the way @nestjs/schedule's docs
 * show (`SchedulerRegistry.deleteInterval(name)`, then `addInterval(name, setInterval(cb, ms))`
 * under the same name, another period) keeps being keyed by the period its decorator declared:
 * every tick of the new period inside one old window is skipped as done. A 60 s poll sped up
 * to 400 ms runs once a minute, silently (each skipped tick publishes `tickSkipped` 'done').
 *
 * Why: `IdempotentTasks.slotOf` (lib/tasks/idempotent-tasks.service.ts) reads a named cron
 * job "as it runs now" from the registry (so `setTime()` is honoured), but an interval's slot
 * is `intervalTimeSlot(schedule, now)` with `schedule.everyMs` read once from the decorator's
 * metadata (`scheduleOf`, lib/tasks/task-schedule.ts). The registry holds the new interval
 * (a Node `Timeout`, whose period it carries), which the library never reads.
 *
 * Expected (docs/guides/schedule.md, "Which tick is which"): a named job rescheduled with
 * `SchedulerRegistry` is keyed by its new schedule (said for `@Cron()`; "The rules": each tick
 * runs once across replicas, none of them skipped on a single replica). The same intent for
 * an interval re-registered under its own name: each window of the period it runs at now runs
 * once (or the library says at start/tick that it cannot tell, rather than skip silently).
 *
 * Control: the `@Cron()` counterpart, rescheduled with `getCronJob(name).setTime()`, runs a
 * tick per new slot.
 *
 * Severity: low-medium (ticks silently dropped, not run twice; the rescheduling idiom is in
 * @nestjs/schedule's "Dynamic intervals" docs; the schedule guide only speaks of cron).
 *
 * Fails now: 'ran 1 of ~8 ticks' (2 when the run crosses a minute boundary).
 *
 * Fixed: a named interval's slot is read with the period of the registry's interval of that
 * name as it runs now (`periodOf` in lib/tasks/idempotent-tasks.service.ts).
 */
import 'reflect-metadata';
import { Injectable, Module } from '@nestjs/common';
import { NestFactory } from '@nestjs/core';
import { Cron, Interval, ScheduleModule, SchedulerRegistry } from '@nestjs/schedule';
import { CronTime } from 'cron';
import { Pool } from 'pg';
import { IdempotencyModule, IdempotentTask } from '../../../lib/index.js';
import { createMigratedDatabase, type MigratedDatabase } from '../../support/migrated-database.js';

let database: MigratedDatabase;
let pool: Pool;
const runs = new Map<string, number>();
const ran = (name: string) => runs.set(name, (runs.get(name) ?? 0) + 1);

@Injectable()
class Poller {
  @Interval('adv71-poll', 60_000)
  @IdempotentTask()
  async poll() {
    ran('interval');
    await pool.query('SELECT 1');
  }
}

@Injectable()
class HourlyCron {
  @Cron('0 0 * * * *', { name: 'adv71-hourly' })
  @IdempotentTask()
  async sweep() {
    ran('cron');
    await pool.query('SELECT 1');
  }
}

async function rescheduled(
  provider: new (...args: never[]) => object,
  name: string,
  reschedule: (registry: SchedulerRegistry, instance: object) => void,
  ms: number,
) {
  @Module({
    imports: [ScheduleModule.forRoot(), IdempotencyModule.forRoot({ globalKeys: true, pool })],
    providers: [provider],
  })
  class AppModule {}
  const app = await NestFactory.createApplicationContext(AppModule, { logger: [] });
  await app.init();
  try {
    reschedule(app.get(SchedulerRegistry), app.get(provider));
    await new Promise((resolve) => setTimeout(resolve, ms));
  } finally {
    await app.close();
  }
  return runs.get(name) ?? 0;
}

describe('adversary 71: an @Interval() task re-registered under its name with another period', () => {
  beforeAll(async () => {
    database = await createMigratedDatabase('adv71_interval_resched');
    pool = new Pool({ connectionString: database.url, max: 4 });
  }, 60_000);

  afterAll(async () => {
    await pool?.end();
    await database?.drop();
  });

  it('control: a named @Cron() rescheduled with setTime() runs a tick per new slot', async () => {
    const count = await rescheduled(
      HourlyCron,
      'cron',
      (registry) => {
        const job = registry.getCronJob('adv71-hourly');
        job.setTime(new CronTime('* * * * * *'));
        job.start();
      },
      3_500,
    );
    expect(count).toBeGreaterThanOrEqual(2);
  }, 60_000);

  it('an @Interval(60 s) re-added at 400 ms under its name runs each 400 ms window', async () => {
    const count = await rescheduled(
      Poller,
      'interval',
      (registry, instance) => {
        registry.deleteInterval('adv71-poll');
        const poller = instance as Poller;
        registry.addInterval(
          'adv71-poll',
          setInterval(() => void poller.poll().catch(() => undefined), 400),
        );
      },
      3_400,
    );
    // Fails: 'ran 1 of ~8 ticks' (every tick inside the declared 60 s window skipped as done).
    expect(count >= 5 ? 'each tick ran' : `ran ${count} of ~8 ticks`).toBe('each tick ran');
  }, 60_000);
});
