import { until } from '../support/brokers.js';
import { onRedis, useJobQueues } from '../support/job-queues.js';
import { startTestPsp } from '../support/test-psp.js';

/**
 * `@IdempotentJob()` on BullMQ when a worker dies or stalls, with real worker processes on a
 * Redis and a PostgreSQL of the test's own, on TypeORM and on the pool seam: a worker SIGKILLed
 * after its job's work committed, before BullMQ heard of it (the next worker takes the job as
 * stalled and completes it with the kept result, paying nothing), and a stalled job whose
 * first worker goes on (its lock ran out: the second worker waits in BullMQ's delayed set,
 * then completes it with the first one's result); a worker SIGKILLed during its call out
 * (`PhaseRunner.call`: the next worker takes the job over and calls with the same key). Each case has its control: the same worker
 * without the decorator pays twice. In test/long: each case waits out BullMQ's stall checks.
 */
onRedis('@IdempotentJob() on BullMQ, when a worker dies or stalls', () => {
  const jobs = useJobQueues('jobs_crash');

  describe.each(['typeorm', 'pool'] as const)('on %s', (seam) => {
    it.each([
      ['with @IdempotentJob(): completed with the killed worker’s result, paid once', '1', ['a']],
      ['control, without it: the second worker pays again', '0', ['a', 'b']],
    ])(
      'a worker SIGKILLed after its commit, before BullMQ heard: %s',
      async (_name, idempotent, expected) => {
        const name = `${seam}-killed-${idempotent}`;
        const stalls = {
          SEAM: seam,
          LOCK_MS: '1500',
          STALLED_MS: '500',
          IDEMPOTENT: idempotent,
          QUEUE: name,
        };
        const a = await jobs.startWorker({ ...stalls, WORKER: 'a', HOLD_AFTER_COMMIT_MS: '60000' });
        const { queue, events } = await jobs.queueOf(name);
        const job = await queue.add('payout', { orderId: name, cents: 900 });
        const finished = job.waitUntilFinished(events, 45_000);
        await until(
          () => Promise.resolve(a.output().includes(`committed ${job.id}`)),
          `worker a's commit:\n${a.output()}`,
          30_000,
        );
        await a.kill();
        // The job's lock runs out with its worker; the next worker takes it as stalled.
        const b = await jobs.startWorker({ ...stalls, WORKER: 'b' });
        const result = await finished;
        expect(result).toEqual({ paid: 900, by: expected.at(-1) === 'b' ? 'b' : 'a' });
        expect((await jobs.payouts(name)).map((row) => row.worker)).toEqual(expected);
        if (idempotent === '1') expect(b.output()).not.toContain(`ran ${job.id}`);
      },
      90_000,
    );

    it.each([
      ['with @IdempotentJob(): the second waits, then completes with the first’s result', '1', 1],
      ['control, without it: both workers pay', '0', 2],
    ])(
      'a stalled job whose first worker goes on (its lock ran out): %s',
      async (_name, idempotent, rows) => {
        const name = `${seam}-stalled-${idempotent}`;
        const common = {
          SEAM: seam,
          IDEMPOTENT: idempotent,
          QUEUE: name,
          LOCK_MS: '1000',
          STALLED_MS: '300',
        };
        // Worker a's lock is not renewed: BullMQ takes the job for stalled while a still works.
        const a = await jobs.startWorker({
          ...common,
          WORKER: 'a',
          HOLD_MS: '4000',
          SKIP_LOCK_RENEWAL: '1',
        });
        const { queue } = await jobs.queueOf(name);
        const job = await queue.add('payout', { orderId: name, cents: 300 });
        await until(() => Promise.resolve(a.output().includes(`ran ${job.id}`)), 'a', 10_000);
        await jobs.startWorker({ ...common, WORKER: 'b' });
        await until(
          async () => ['completed', 'failed'].includes(await job.getState()),
          'the job to end',
          45_000,
        );
        await new Promise((resolve) => setTimeout(resolve, 500));
        // The control shows the duplicate: at least two payouts (on a loaded machine a late lock
        // renewal can stall the job once more and pay a third time); with the library, exactly one.
        const paid = (await jobs.payouts(name)).length;
        if (idempotent === '1') expect(paid).toBe(rows);
        else expect(paid).toBeGreaterThanOrEqual(rows);
        if (idempotent === '1') {
          expect(await job.getState()).toBe('completed');
          const done = await queue.getJob(job.id!);
          expect(done?.returnvalue).toEqual({ paid: 300, by: 'a' });
        }
      },
      90_000,
    );
  });

  it('a worker SIGKILLed during its call out: the next takes the job over and calls with the same key', async () => {
    const psp = await startTestPsp();
    try {
      const name = 'psp-killed';
      const env = {
        QUEUE: name,
        PSP_URL: psp.url,
        LOCK_MS: '1500',
        STALLED_MS: '500',
        LEASE_MS: '2000',
      };
      psp.hangNext(1);
      const a = await jobs.startWorker({ ...env, WORKER: 'a' });
      const { queue, events } = await jobs.queueOf(name);
      const job = await queue.add('payout', { orderId: name, cents: 400 });
      const finished = job.waitUntilFinished(events, 60_000);
      await until(() => Promise.resolve(psp.keys.length === 1), 'the first call', 30_000);
      await a.kill();
      // Its record committed before the call: the next worker waits out its lease, takes the
      // key over and resumes at the call, with the key the first worker derived.
      await jobs.startWorker({ ...env, WORKER: 'b' });
      const result = (await finished) as { by: string; transfer: string };
      expect(psp.keys).toHaveLength(2);
      expect(psp.keys[1]).toBe(psp.keys[0]);
      expect(result).toEqual({ paid: 400, by: 'b', transfer: `tr-${psp.keys[0]}` });
      expect((await jobs.payouts(name)).map((row) => row.worker)).toEqual(['b']);
    } finally {
      await psp.close();
    }
  }, 90_000);
});
