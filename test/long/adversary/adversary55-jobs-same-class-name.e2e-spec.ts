/**
 * Adversary 55: two processors whose classes share a name (one factory function making a
 * processor per queue; or two files each with a `JobsProcessor`) share their
 * `@IdempotentJob()` options: whichever ran first gives its `key` to the other.
 *
 * The app: `processorFor(queue, options)` returns a `@Processor(queue)` class
 * `QueueProcessor extends WorkerHost` with `@IdempotentJob(options) process(job)`; the app
 * registers one for `emails` (keyed by the job's id, `{}`) and one for `refunds` (keyed by
 * the refund, `{ key: (job) => job.data.refundId }`: "a refund requested twice" is refunded
 * once). Each job inserts a row. Nest holds them as two providers, two workers, two queues.
 *
 * What happens: the decorator names its method `${target.constructor.name}.${property}`
 * (lib/jobs/idempotent-job.decorator.ts, `where`), the same `QueueProcessor.process` for both,
 * and `IdempotentJobs.settingsOf` (lib/jobs/idempotent-jobs.service.ts) keeps the resolved
 * options by that name: the first job run (an email) fixes them for both classes. The refunds
 * are then keyed by their job ids: the refund enqueued twice runs twice. (Run the other way,
 * the emails take the refunds' key and fail: "key(job) gave no key".)
 *
 * Expected (docs/guides/jobs.md, "Its key"): "`key: (job) => string`, for one intent that may
 * be enqueued as several jobs (a refund requested twice): the second job completes with the
 * first one's result". Nothing in the guide asks for processor class names to differ, and Nest
 * does not.
 *
 * Control: the refunds processor alone: the refund enqueued twice runs once.
 *
 * Severity: high (a refund twice).
 */
import { onRedis } from '../../support/job-queues.js';
import { settled, useAdv55 } from '../../support/adv55-fixture.js';

onRedis('adversary 55: two processor classes of one name', () => {
  const adv = useAdv55('adv55_same_class_name');

  it('control: the refunds processor alone runs a refund enqueued twice once', async () => {
    await adv.startWorker({ MODE: 'factory', ONLY_REFUNDS: '1' });
    const { queue } = adv.queueOf('refunds');
    const first = await queue.add('refund', { orderId: 'alone-1', refundId: 'r-alone' });
    expect((await settled(queue, first.id!)).state).toBe('completed');
    const second = await queue.add('refund', { orderId: 'alone-1', refundId: 'r-alone' });
    expect((await settled(queue, second.id!)).state).toBe('completed');
    expect(await adv.steps('alone-1')).toEqual(['refunds']);
  });

  it('beside an emails processor of the same class name, a refund enqueued twice runs once', async () => {
    await adv.startWorker({ MODE: 'factory' });
    const emails = adv.queueOf('emails').queue;
    const refunds = adv.queueOf('refunds').queue;
    const email = await emails.add('welcome', { orderId: 'mail-1' });
    expect((await settled(emails, email.id!)).state).toBe('completed');
    const first = await refunds.add('refund', { orderId: 'both-1', refundId: 'r-both' });
    expect((await settled(refunds, first.id!)).state).toBe('completed');
    const second = await refunds.add('refund', { orderId: 'both-1', refundId: 'r-both' });
    expect((await settled(refunds, second.id!)).state).toBe('completed');
    // Fails: ['refunds', 'refunds']: the refunds were keyed by their job ids (the emails'
    // options), and the refund ran twice.
    expect(await adv.steps('both-1')).toEqual(['refunds']);
  });
});
