/**
 * Adversary 59: a `@Cron()` job rescheduled at run time (`SchedulerRegistry.getCronJob(name)
 * .setTime(new CronTime(...))`, Nest's "dynamic cron jobs" recipe) keeps its slots on the
 * schedule the decorator declared: ticks of a denser new schedule map to one old slot, and all
 * but the first are skipped as done, silently.
 *
 * The app: `@Cron('0 0 * * * *', { name: 'settle' })` + `@IdempotentTask()` (hourly, its
 * default), and at start-up, from configuration, `registry.getCronJob('settle').setTime(new
 * CronTime('* * * * * *'))` (every second; in life: hourly to every five minutes, say).
 *
 * What happens: cron fires every second (job.js `setTime`, `start`). Each tick's slot
 * (lib/tasks/task-schedule.ts `scheduleOf` / `slotOf`) is computed from the method's
 * `SCHEDULE_CRON_OPTIONS` metadata, read once at start-up (`taskOf`, cached): the hourly
 * `'0 0 * * * *'`, whatever the job now runs by. Every tick of the hour gets the slot hh:00:00;
 * the first claims it and runs, the next ones find it done (replay) and return without
 * running. No warning. (A job the app adds with `addCronJob` to call the decorated method on
 * a schedule of its own is keyed by the decorator's schedule in the same way.)
 *
 * Expected: each tick of the job's schedule runs once (the slot from the job that fired it),
 * or the library says the schedule it keys by is not the job's.
 *
 * Control: the same task declared `@Cron('* * * * * *')` (no setTime): each second runs, each
 * its own slot.
 *
 * Severity: high (a documented @nestjs/schedule API; ticks lost silently).
 *
 * Fixed: a named cron's slot is read from its job as it runs now (`SchedulerRegistry
 * .getCronJob(name).cronTime`), `setTime` included; an unnamed one's from its declared schedule.
 */
import { Inject, Injectable, type OnApplicationBootstrap } from '@nestjs/common';
import { Cron, SchedulerRegistry } from '@nestjs/schedule';
import { CronTime } from 'cron';
import { type Pool } from 'pg';
import { IdempotentTask } from '../../../lib/index.js';
import { recordTick, sleep, startAdv59App, TICKS_POOL } from '../../support/adv59-app.js';
import { useTaskReplicas } from '../../support/task-replicas.js';

/** Declared hourly; set to every second as the app boots (its configuration says so). */
@Injectable()
class Rescheduled implements OnApplicationBootstrap {
  constructor(
    @Inject(TICKS_POOL) private readonly pool: Pool,
    private readonly registry: SchedulerRegistry,
  ) {}

  onApplicationBootstrap() {
    // After ScheduleModule's own bootstrap has mounted the job (its module is imported
    // first); else on the next turn.
    const reschedule = () =>
      this.registry.getCronJob('settle').setTime(new CronTime('* * * * * *'));
    if (this.registry.doesExist('cron', 'settle')) reschedule();
    else setImmediate(reschedule);
  }

  @Cron('0 0 * * * *', { name: 'settle' })
  @IdempotentTask()
  settle() {
    return recordTick(this.pool, 'rescheduled');
  }
}

@Injectable()
class EverySecond {
  constructor(@Inject(TICKS_POOL) private readonly pool: Pool) {}

  @Cron('* * * * * *', { name: 'settle' })
  @IdempotentTask()
  settle() {
    return recordTick(this.pool, 'declared');
  }
}

describe('adversary 59: a @Cron() job rescheduled with setTime()', () => {
  const replicas = useTaskReplicas('adv59_settime');
  beforeEach(() => replicas.reset());

  async function runFor(task: unknown, ms: number) {
    const { close } = await startAdv59App(replicas, { providers: [task] });
    await sleep(ms);
    await close();
    const slots = (await replicas.ticks()).map((row) => row.slot);
    return { runs: Math.min(slots.length, 3), distinct: new Set(slots).size === slots.length };
  }

  it('control: declared every second, each second runs with its own slot', async () => {
    expect(await runFor(EverySecond, 4_200)).toEqual({ runs: 3, distinct: true });
  }, 30_000);

  it('set to every second at run time, each second runs with its own slot', async () => {
    // Fails: one run (slot hh:00:00, the declared hourly schedule's); the other ticks of the
    // hour found that key done and were skipped.
    expect(await runFor(Rescheduled, 4_200)).toEqual({ runs: 3, distinct: true });
  }, 30_000);
});
