import { Injectable, Module } from '@nestjs/common';
import { NestFactory } from '@nestjs/core';
import { Interval, ScheduleModule, Timeout } from '@nestjs/schedule';
import { Pool } from 'pg';
import { IdempotencyModule, IdempotentTask } from '../../lib/index.js';
import { until } from '../support/brokers.js';
import { type TickRow, useTaskReplicas } from '../support/task-replicas.js';
import { startTestPsp } from '../support/test-psp.js';

/**
 * `@IdempotentTask()` on `@nestjs/schedule`, with real replica processes on a PostgreSQL of
 * the test's own: every replica's timer fires for each tick, one replica runs it and the
 * others skip it, on TypeORM and on the pool seam, by `@Cron()` and by `@Interval()`; a
 * replica SIGKILLed mid-tick (after its call out) is resumed by another after its lease, the
 * PSP called once; a tick that throws keeps nothing. Each has its control without the library.
 * Replicas killed and restarted for a minute: test/long/tasks-replicas.
 */
describe('@IdempotentTask() on @nestjs/schedule, with real replicas', () => {
  const replicas = useTaskReplicas('tasks');
  const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));
  /** The rows of each slot that ticked. */
  const bySlot = (rows: TickRow[]) => {
    const slots = new Map<string, TickRow[]>();
    for (const row of rows) slots.set(row.slot, [...(slots.get(row.slot) ?? []), row]);
    return [...slots.values()];
  };
  /** Runs `count` replicas with `env` for `ms` once all of them tick, then stops them. */
  async function runReplicas(count: number, env: Record<string, string>, ms: number) {
    const started = await Promise.all(
      Array.from({ length: count }, (_, index) => replicas.start({ ...env, REPLICA: `r${index}` })),
    );
    await sleep(ms);
    await Promise.all(started.map((replica) => replica.kill()));
    return bySlot(await replicas.ticks());
  }

  beforeEach(() => replicas.reset());

  it.each([
    ['typeorm', 'cron'],
    ['pool', 'interval'],
  ])(
    'three replicas (%s, by %s): each tick runs once',
    async (seam, schedule) => {
      const slots = await runReplicas(
        3,
        { SEAM: seam, SCHEDULE: schedule, INTERVAL_MS: '400' },
        3_200,
      );
      expect(slots.length).toBeGreaterThanOrEqual(3);
      expect(slots.filter((rows) => rows.length > 1)).toEqual([]);
      // Nothing left unfinished but the tick the SIGKILL may cut as it runs (on a loaded
      // machine a tick's run can outlast the moment the replicas are killed): the last one.
      const last = slots.flat().reduce((max, row) => (row.slot > max ? row.slot : max), '');
      const unfinished = await replicas.unfinished();
      expect(unfinished.length).toBeLessThanOrEqual(1);
      expect(unfinished.filter((slot) => slot <= last)).toEqual([]);
    },
    60_000,
  );

  it('control, without it: three replicas run each tick three times', async () => {
    const slots = await runReplicas(3, { IDEMPOTENT: '0' }, 2_500);
    expect(slots.some((rows) => rows.length === 3)).toBe(true);
  }, 60_000);

  it('a replica SIGKILLed mid-tick, after its call out: another resumes it after its lease, the PSP called once', async () => {
    const psp = await startTestPsp();
    try {
      const env = { SEAM: 'pool', PSP_URL: psp.url, LEASE_MS: '1500' };
      const dying = await replicas.start({ ...env, REPLICA: 'dying', HOLD_MS: '60000' });
      await until(() => Promise.resolve(dying.output().includes('called ')), 'a call out', 10_000);
      const slot = /called (\S+)/.exec(dying.output())![1];
      await dying.kill();
      const [first] = psp.keys;
      await replicas.start({ ...env, REPLICA: 'taker' });
      let row: TickRow | undefined;
      await until(
        async () => {
          row = (await replicas.ticks()).find((tick) => tick.slot === slot);
          return row !== undefined;
        },
        'the killed tick to be resumed',
        15_000,
      );
      expect(row).toEqual({ slot, replica: 'taker', resumed: true, transfer: `tr-${first}` });
      // The call out of the killed tick was not made again: its phase's result was kept.
      expect(psp.keys.filter((key) => key === first)).toHaveLength(1);
      expect(bySlot(await replicas.ticks()).filter((rows) => rows.length > 1)).toEqual([]);
    } finally {
      await psp.close();
    }
  }, 60_000);

  it.each([
    ['with @IdempotentTask(): its insert rolled back, its failure kept (not run again)', '1'],
    ['control, without it: its insert stays', '0'],
  ])(
    'a tick that throws after its insert: %s',
    async (_name, idempotent) => {
      const replica = await replicas.start({ SEAM: 'pool', FAIL: '1', IDEMPOTENT: idempotent });
      await sleep(2_200);
      await replica.kill();
      const rows = await replicas.ticks();
      if (idempotent === '1') {
        expect(rows).toEqual([]);
        expect(replica.output()).toMatch(/the ledger refused the tick of/);
        // Each failed tick's key is kept as failed, not left unfinished; only a tick the
        // SIGKILL cut mid-way may be (on a loaded machine, one tick's run outlasts the 200 ms
        // between its slot and the kill), and it is the last one.
        const unfinished = await replicas.unfinished();
        expect(unfinished.length).toBeLessThanOrEqual(1);
        for (const slot of unfinished) {
          expect(replica.output()).not.toContain(`the ledger refused the tick of ${slot}`);
        }
      } else {
        expect(rows.length).toBeGreaterThanOrEqual(2);
      }
    },
    60_000,
  );

  describe('refused at start-up, saying what to do', () => {
    @Injectable()
    class Unscheduled {
      @IdempotentTask()
      settle() {}
    }

    @Injectable()
    class OnTimeout {
      @IdempotentTask()
      @Timeout(1_000)
      settle() {}
    }

    @Injectable()
    class Settle {
      @IdempotentTask({ name: 'settle' })
      @Interval(60_000)
      run() {}
    }

    @Injectable()
    class SettleAgain {
      @IdempotentTask({ name: 'settle' })
      @Interval(60_000)
      run() {}
    }

    it.each([
      [
        'two tasks of one name: their ticks would be one task’s',
        [Settle, SettleAgain],
        '@IdempotentTask() on SettleAgain.run: Settle.run is a task of the same name (settle)',
      ],
      [
        'no @Cron() or @Interval() on the method',
        [Unscheduled],
        '@IdempotentTask() on Unscheduled.settle needs @Cron() or @Interval() (from @nestjs/schedule) on the same method',
      ],
      [
        'a @Timeout(): nothing tells its runs apart',
        [OnTimeout],
        '@IdempotentTask() on OnTimeout.settle: a @Timeout() runs once on each replica as it starts',
      ],
    ])(
      '%s',
      async (_name, tasks, words) => {
        const pool = new Pool({ connectionString: replicas.url(), max: 2 });
        @Module({
          imports: [
            ScheduleModule.forRoot(),
            IdempotencyModule.forRoot({ globalKeys: true, pool }),
          ],
          providers: tasks,
        })
        class AppModule {}
        try {
          await expect(
            NestFactory.createApplicationContext(AppModule, { logger: false, abortOnError: false }),
          ).rejects.toThrow(words);
        } finally {
          await pool.end();
        }
      },
      30_000,
    );

    it('a wrong option fails as the class is defined', () => {
      expect(() => IdempotentTask({ resumeWithinMs: -1 })).toThrow(
        '@IdempotentTask() on a task: resumeWithinMs must be a whole number of milliseconds, 0 or more',
      );
      expect(() => IdempotentTask({ name: '' })).toThrow(
        '@IdempotentTask() on a task: name must be a string of 1 to 200 characters',
      );
    });
  });
});
