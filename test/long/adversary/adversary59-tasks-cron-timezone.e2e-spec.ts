/**
 * Adversary 59: a `@Cron()` with `timeZone` (or `utcOffset`) and a restricted hour field, on
 * a server whose zone is another (UTC, as servers and containers usually are): every tick of
 * its first hours maps to ONE slot, and all but the first are skipped as already done.
 *
 * The app: `@Cron('* * H * * *', { timeZone: 'Asia/Tokyo' })` + `@IdempotentTask()`, H being
 * Tokyo's current hour (the test's stand-in for a business-hours task such as
 * `@Cron('0 *\/15 9-17 * * 1-5', { timeZone: 'Europe/Berlin' })` on UTC servers). One replica.
 *
 * What happens: `cron` fires every second of Tokyo's hour H, as told (job.js `start`, its
 * `CronTime` set to the zone). The library's slot (lib/tasks/task-schedule.ts `slotOf`) builds
 * `new CronTime(cronTime, timeZone, utcOffset)` but asks it `getNextDateFrom(new Date(ms))`
 * without a zone: cron's time.js `getNextDateFrom` then takes the zone of its start (a JS
 * Date: luxon's SYSTEM zone), not the CronTime's. So `cronSlot` finds "the latest second of
 * hour H" in UTC: H:59:59Z, hours before (or a day before), the same for every tick of the hour. The first
 * tick claims it and runs; each later tick claims the same key, finds it done (replay) and is
 * skipped, silently. For the business-hours cron on UTC servers that is every tick of the
 * zone's hours the UTC hours do not share (Berlin's 9:00 to 9:45 in winter: one run of four;
 * Tokyo's whole day). `currentTick().slot` is that wrong time too (the docs' "time to settle
 * up to"). Replicas whose system zones differ compute different slots for the same tick and
 * each run it (a mixed fleet: effects twice).
 *
 * Expected: each tick's slot is the time cron fired for, in the cron's zone: one run per
 * second, each with its own slot.
 *
 * Control: the same task with no timeZone (the server's zone, H its hour) runs every second,
 * each tick its own slot.
 *
 * Severity: high (ticks lost silently every day, for a documented @nestjs/schedule option on
 * the most common server setup; effects twice on a fleet of mixed zones).
 *
 * Fixed: the slot is read in the zone cron reads the schedule in (`cronZone`: its timeZone,
 * else its utcOffset as `UTC±hh:mm`), lib/tasks/task-schedule.ts `cronTimeSlot`.
 */
import { Inject, Injectable } from '@nestjs/common';
import { Cron } from '@nestjs/schedule';
import { type Pool } from 'pg';
import { IdempotentTask } from '../../../lib/index.js';
import { recordTick, sleep, startAdv59App, TICKS_POOL } from '../../support/adv59-app.js';
import { useTaskReplicas } from '../../support/task-replicas.js';

const ZONE = 'Asia/Tokyo';

/** The hour now in `zone` (the system's when undefined). */
function hourIn(zone?: string): number {
  const hour = new Intl.DateTimeFormat('en-GB', { hour: '2-digit', hour12: false, timeZone: zone })
    .formatToParts(new Date())
    .find((part) => part.type === 'hour')!.value;
  return Number(hour) % 24;
}

/** Waits, if the hour ends within `ms`, until the next one has begun. */
async function awayFromHourEnd(ms: number): Promise<void> {
  const left = 3_600_000 - (Date.now() % 3_600_000);
  if (left < ms) await sleep(left + 1_500);
}

describe('adversary 59: @Cron() with timeZone under @IdempotentTask()', () => {
  const replicas = useTaskReplicas('adv59_cron_tz');
  beforeEach(() => replicas.reset());

  /** Runs `task` alone for `ms` and gives its rows' slots. */
  async function runFor(task: unknown, ms: number): Promise<string[]> {
    const { close } = await startAdv59App(replicas, { providers: [task] });
    await sleep(ms);
    await close();
    return (await replicas.ticks()).map((row) => row.slot);
  }

  it('control: every second of the server zone’s current hour, each tick its own slot', async () => {
    await awayFromHourEnd(15_000);
    const hour = hourIn();
    @Injectable()
    class LocalHours {
      constructor(@Inject(TICKS_POOL) private readonly pool: Pool) {}
      @Cron(`* * ${hour} * * *`)
      @IdempotentTask({ name: 'local-hours' })
      tick() {
        return recordTick(this.pool, 'local');
      }
    }
    const started = Date.now();
    const slots = await runFor(LocalHours, 4_200);
    expect(slots.length).toBeGreaterThanOrEqual(3);
    expect(new Set(slots).size).toBe(slots.length);
    for (const slot of slots) expect(Math.abs(Date.parse(slot) - started)).toBeLessThan(10_000);
  }, 30_000);

  it(`every second of ${ZONE}'s current hour (timeZone), each tick its own slot`, async () => {
    await awayFromHourEnd(15_000);
    const hour = hourIn(ZONE);
    expect(hour).not.toBe(hourIn()); // the server is not in Tokyo's zone
    @Injectable()
    class TokyoHours {
      constructor(@Inject(TICKS_POOL) private readonly pool: Pool) {}
      @Cron(`* * ${hour} * * *`, { timeZone: ZONE })
      @IdempotentTask({ name: 'tokyo-hours' })
      tick() {
        return recordTick(this.pool, 'tokyo');
      }
    }
    const started = Date.now();
    const slots = await runFor(TokyoHours, 4_200);
    // Fails: one row, its slot H:59:59Z (the last second of hour H in UTC, hours ago);
    // every later tick found that key done and was skipped.
    expect({ runs: Math.min(slots.length, 3), slots: slots.slice(0, 1) }).toEqual({
      runs: 3,
      slots: [expect.stringMatching(new Date(started).toISOString().slice(0, 14))],
    });
    expect(new Set(slots).size).toBe(slots.length);
    for (const slot of slots) expect(Math.abs(Date.parse(slot) - started)).toBeLessThan(10_000);
  }, 30_000);
});
