import { onRedis, useJobQueues } from '../support/job-queues.js';
import { startTestPsp } from '../support/test-psp.js';

/**
 * `@IdempotentJob()` on BullMQ, with real worker processes on a Redis and a PostgreSQL of the
 * test's own: a job's payout and its record commit together, so a job that comes back (the
 * same job id added again, a retry after an error) pays once and completes with the first
 * result, on TypeORM and on the pool seam; a key of the app's says one intent; what the
 * library cannot keep fails the job at once, saying why. Each case has its control: the same
 * worker without the decorator pays twice. Crashes and stalls: test/long/jobs-crash.
 */
onRedis('@IdempotentJob() on BullMQ, with real workers', () => {
  const jobs = useJobQueues('jobs');

  describe.each(['typeorm', 'pool'] as const)('on %s', (seam) => {
    it.each([
      ['with @IdempotentJob()', '1', ['a']],
      ['control, without it: the second add pays again', '0', ['a', 'a']],
    ])(
      'the same job id added again after the first completed: %s',
      async (_name, idempotent, expected) => {
        const name = `${seam}-again-${idempotent}`;
        await jobs.startWorker({ SEAM: seam, QUEUE: name, WORKER: 'a', IDEMPOTENT: idempotent });
        const { queue, events } = await jobs.queueOf(name);
        const add = () => queue.add('payout', { orderId: name, cents: 500 }, { jobId: name });
        const once = await add();
        const first = await jobs.finished(once, events);
        // Removed once done (as `removeOnComplete` would), then added again under its id. Not
        // `removeOnComplete` itself: a job gone before `waitUntilFinished` looks at it is
        // never seen to finish.
        await once.remove();
        const second = await jobs.finished(await add(), events);
        expect(first).toEqual({ paid: 500, by: 'a' });
        expect(second).toEqual(first);
        expect((await jobs.payouts(name)).map((row) => row.worker)).toEqual(expected);
      },
      60_000,
    );

    it.each([
      ['with @IdempotentJob(): the failed try rolled back, paid once', '1', 1],
      ['control, without it: the failed try paid too', '0', 2],
    ])(
      'a retry after an error: %s',
      async (_name, idempotent, rows) => {
        const name = `${seam}-retry-${idempotent}`;
        await jobs.startWorker({
          SEAM: seam,
          QUEUE: name,
          WORKER: 'a',
          IDEMPOTENT: idempotent,
          FAIL_FIRST: '1',
        });
        const { queue, events } = await jobs.queueOf(name);
        const job = await queue.add('payout', { orderId: name, cents: 700 }, { attempts: 3 });
        expect(await jobs.finished(job, events)).toEqual({ paid: 700, by: 'a' });
        expect(await jobs.payouts(name)).toHaveLength(rows);
      },
      60_000,
    );
  });

  it.each([
    ['with @IdempotentJob(): the PSP called once, with the job’s derived key', '1', 1],
    ['control, without it: called again, with another key', '0', 2],
  ])(
    'a job that calls out (PhaseRunner.call), retried after an error: %s',
    async (_name, idempotent, calls) => {
      const psp = await startTestPsp();
      try {
        const name = `psp-${idempotent}`;
        await jobs.startWorker({
          QUEUE: name,
          WORKER: 'a',
          IDEMPOTENT: idempotent,
          PSP_URL: psp.url,
          FAIL_FIRST: '1',
        });
        const { queue, events } = await jobs.queueOf(name);
        const job = await queue.add('payout', { orderId: name, cents: 250 }, { attempts: 3 });
        const result = (await jobs.finished(job, events)) as { transfer: string };
        expect(psp.keys).toHaveLength(calls);
        expect(new Set(psp.keys).size).toBe(calls);
        expect(result.transfer).toBe(`tr-${psp.keys.at(-1)}`);
        // Its payout row: once with the library (the failed try's rolled back), else twice.
        expect(await jobs.payouts(name)).toHaveLength(calls);
      } finally {
        await psp.close();
      }
    },
    60_000,
  );

  it('a key of the app’s (data.orderId): two jobs of one order pay once; another payout under it fails', async () => {
    const name = 'keyed';
    await jobs.startWorker({ QUEUE: name, WORKER: 'a', KEYED: '1' });
    const { queue, events } = await jobs.queueOf(name);
    const first = await queue.add('payout', { orderId: 'order-7', cents: 100 });
    expect(await jobs.finished(first, events)).toEqual({ paid: 100, by: 'a' });
    const twin = await queue.add('payout', { orderId: 'order-7', cents: 100 });
    expect(await jobs.finished(twin, events)).toEqual({ paid: 100, by: 'a' });
    const other = await queue.add('payout', { orderId: 'order-7', cents: 999 }, { attempts: 5 });
    await expect(jobs.finished(other, events)).rejects.toThrow(
      /@IdempotentJob\(\) on PayoutsProcessor\.payKeyed: .*key.*/i,
    );
    const failed = await queue.getJob(other.id!);
    // Failed for good at once: the same key with other data is never a retry.
    expect(failed?.attemptsMade).toBe(1);
    expect(await jobs.payouts('order-7')).toHaveLength(1);
  }, 60_000);

  it('a key it cannot keep (over 255 characters): failed at once, saying why, nothing paid', async () => {
    const name = 'unusable';
    await jobs.startWorker({ QUEUE: name, WORKER: 'a', KEYED: '1' });
    const { queue, events } = await jobs.queueOf(name);
    const job = await queue.add('payout', { orderId: 'x'.repeat(300), cents: 1 }, { attempts: 5 });
    await expect(jobs.finished(job, events)).rejects.toThrow('its key is over 255 characters');
    expect((await queue.getJob(job.id!))?.attemptsMade).toBe(1);
    expect(await jobs.payouts('x'.repeat(300))).toHaveLength(0);
  }, 60_000);
});
