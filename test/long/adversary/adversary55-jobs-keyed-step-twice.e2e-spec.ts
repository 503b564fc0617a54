/**
 * Adversary 55: the same intent enqueued twice (`@IdempotentJob({ key })`) runs its first
 * step twice when the second job comes while the first is between its steps.
 *
 * The app: a processor keyed by its order (`key: (job) => job.data.orderId`, the guide's "one
 * intent that may be enqueued as several jobs (a refund requested twice)") running BullMQ's
 * step idiom (https://docs.bullmq.io/patterns/process-step-jobs): step one inserts a row, then
 * `job.updateData({ step: 'second' })`, `job.moveToDelayed(ts, token)`, `throw new
 * DelayedError()`. The order is enqueued again (a client's retry) while the first job waits in
 * the delayed set for its second step.
 *
 * What happens: the first job's step commits with its key "unfinished, its lease ended"
 * (lib/jobs/idempotent-jobs.service.ts `keepStep`, lib/claim/postgres-statements.ts
 * RELEASE_JOB_STEP: `locked_until = NULL`). That is a key given back: any job with the same
 * key and the same data takes it over (lib/http/claim-or-decide.ts `onExisting`, `take-over`
 * with `resumes`), not only the job whose step it was. The second job's data is the order as
 * first enqueued (its step not yet written), so it matches the key's fingerprint, takes it over
 * and runs step one again: its row is inserted twice.
 *
 * Expected (docs/guides/jobs.md, "Its key"): with `key`, "the same intent … enqueued as
 * several jobs (a refund requested twice): the second job completes with the first one's
 * result"; and a step job's "key stays unfinished, and its next run goes on" — its own next
 * run, not another job's first.
 *
 * Control: the same keyed job in one step, enqueued twice: the second completes with the
 * first one's result, one row.
 *
 * Severity: high (a step's effects twice).
 */
import { until } from '../../support/brokers.js';
import { onRedis } from '../../support/job-queues.js';
import { settled, useAdv55 } from '../../support/adv55-fixture.js';

onRedis('adversary 55: a keyed step job enqueued twice', () => {
  const adv = useAdv55('adv55_keyed_step_twice');

  it('control: a one-step keyed job enqueued twice runs once', async () => {
    await adv.startWorker({ MODE: 'steps', QUEUE: 'once', KEYED: '1' });
    const { queue } = adv.queueOf('once');
    const first = await queue.add('order', { orderId: 'once-1', step: 'second' });
    expect((await settled(queue, first.id!)).state).toBe('completed');
    const second = await queue.add('order', { orderId: 'once-1', step: 'second' });
    const end = await settled(queue, second.id!);
    expect(end).toMatchObject({ state: 'completed', returnvalue: { done: 'once-1' } });
    expect(await adv.steps('once-1')).toEqual(['second']);
  });

  it("a second job of the order, between the first one's steps, does not run step one again", async () => {
    // Its intent is the order (jobs.md: a step job that updates its data gives fingerprint).
    await adv.startWorker({
      MODE: 'steps',
      QUEUE: 'twice',
      KEYED: '1',
      FINGERPRINT: 'order',
      STEP_DELAY_MS: '4000',
    });
    const { queue } = adv.queueOf('twice');
    const first = await queue.add('order', { orderId: 'twice-1' });
    // The first job's step one committed; it waits in the delayed set for its second step.
    await until(
      async () =>
        (await adv.steps('twice-1')).length === 1 &&
        (await queue.getJobState(first.id!)) === 'delayed',
      'the first step to commit',
    );
    const second = await queue.add('order', { orderId: 'twice-1' });
    await Promise.all([settled(queue, first.id!), settled(queue, second.id!)]);
    // Fails: ['first', 'first']: the second job took the key over and ran step one again.
    expect((await adv.steps('twice-1')).filter((step) => step === 'first')).toEqual(['first']);
  });
});
