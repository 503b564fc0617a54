/**
 * Adversary 56: `keys release`, the guide's way out for a job waiting on a key whose step job
 * failed for good, releases nothing that holds it: the waiting job stays in the delayed set.
 *
 * The app: a processor running BullMQ's step idiom under `@IdempotentJob({ key, fingerprint })`
 * keyed by `data.orderId`: step one inserts a row, `job.updateData({ step: 'second' })`,
 * `job.moveToDelayed(ts, token)`, `throw new DelayedError()`; step two fails for good
 * (`UnrecoverableError`). The same order is enqueued again as a second job after the first
 * failed. The operator, as jobs.md "Limits" says, runs `keys release bullmq:<queue> <order>`.
 *
 * What happens: the first job's key is unfinished and its steps' owner, `bullmq:step`, stays
 * in its phase results; its lease is already gone (RELEASE_JOB_STEP and the failed run's
 * release set `locked_until = NULL`). `keys release` (lib/cli/database.ts `releaseKey`) sets
 * `locked_until = NULL` again and leaves the phase results: `stepHold`
 * (lib/jobs/job-steps.ts) still finds another job's owner, and the second job goes back to
 * the delayed set every second, for ever.
 *
 * Expected (docs/guides/jobs.md, "Limits"): "A job whose steps hold its key and that then
 * fails for good leaves its key unfinished: another job of its key waits in the delayed set
 * until the key is released (`keys release`) or purged." Released, it runs.
 *
 * Control: when the first job's steps complete, the second job of its key completes with its
 * result.
 *
 * Severity: medium (a job stuck, the documented remedy a no-op; no effect twice). Low if the
 * guide's words are what is wrong.
 *
 * Resolved by the guide: the key stays the failed job's (`keys release` would let another
 * job run its steps again on top of them); jobs.md says to retry the failed job, which goes
 * on from its step, and the waiting job then replays (the test below).
 */
import { onRedis } from '../../support/job-queues.js';
import { settled, useAdv55 } from '../../support/adv55-fixture.js';

const WORKER = 'test/support/adv56-worker.js';

onRedis('adversary 56: keys release of a failed step job’s key', () => {
  const adv = useAdv55('adv56_release_step_owner');

  it('control: a second job of a key whose steps completed completes with their result', async () => {
    await adv.startWorker({ QUEUE: 'fine', STEP_DELAY_MS: '300', KEYED: '1' }, WORKER);
    const { queue } = adv.queueOf('fine');
    const first = await queue.add('order', { orderId: 'fine-1' });
    expect((await settled(queue, first.id!)).state).toBe('completed');
    const second = await queue.add('order', { orderId: 'fine-1' });
    const end = await settled(queue, second.id!);
    expect(end).toMatchObject({ state: 'completed', returnvalue: { done: 'fine-1' } });
    expect(await adv.steps('fine-1')).toEqual(['first', 'second']);
  }, 45_000);

  it('the failed job retried once its fault is fixed goes on from its step; the waiting job then replays', async () => {
    // Failed against the guide's first words ("until the key is released (`keys release`)"):
    // released, the waiting job would run step one again (its own data) on top of the failed
    // job's committed step one. The key stays the failed job's; jobs.md now says to retry
    // that job, which goes on from its step, and the waiting job then completes with its
    // result. `keys release` hands no key to another job.
    const failing = await adv.startWorker(
      { QUEUE: 'stuck', STEP_DELAY_MS: '300', KEYED: '1', FAIL_SECOND: '1' },
      WORKER,
    );
    const { queue } = adv.queueOf('stuck');
    const first = await queue.add('order', { orderId: 'stuck-1' });
    expect((await settled(queue, first.id!)).state).toBe('failed');
    const second = await queue.add('order', { orderId: 'stuck-1' });
    await new Promise((resolve) => setTimeout(resolve, 2_000));
    expect(await queue.getJobState(second.id!)).toBe('delayed');
    // The fault fixed (a worker without it), the failed job retried (BullMQ's own retry).
    await failing.kill();
    await adv.startWorker({ QUEUE: 'stuck', STEP_DELAY_MS: '300', KEYED: '1' }, WORKER);
    const failed = await queue.getJob(first.id!);
    await failed!.retry('failed');
    expect((await settled(queue, first.id!, 20_000)).state).toBe('completed');
    // The waiting job comes back after 2, 4, 8… seconds by its own starts, a minute at most
    // (jobs.md): by the time the retried job completes it may be a minute away.
    const end = await settled(queue, second.id!, 75_000);
    expect(end.state).toBe('completed');
    expect(await adv.steps('stuck-1')).toEqual(['first', 'second']);
  }, 150_000);
});
