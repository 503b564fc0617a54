/**
 * Adversary 55: a keyed step job (`@IdempotentJob({ key })` on BullMQ's step-jobs idiom) is
 * failed for good at its second step, its first step's work committed.
 *
 * The app: a processor keyed by its order (`key: (job) => job.data.orderId`, the guide's form
 * for one intent enqueued as several jobs) that runs BullMQ's step idiom
 * (https://docs.bullmq.io/patterns/process-step-jobs) as BullMQ writes it: the step is kept in
 * the job's data (`job.updateData({ ...data, step: 'second' })`), then
 * `job.moveToDelayed(ts, token)` and `throw new DelayedError()`.
 *
 * What happens: step one commits (as round 54 fixed); the job's next run reads its data, now
 * with `step: 'second'`, and its fingerprint is taken from that data
 * (lib/jobs/idempotent-jobs.service.ts, `computeFingerprint` in `runOnce`: `body:
 * canonicalizeValue(job.data)` for a derived key) — not the fingerprint its own first run
 * stored. The key "was used by a job with other data": `IdempotencyKeyMismatchError`, failed
 * at once (`UnrecoverableError`), attempts unused. The job is failed with half its work
 * committed; retrying it by hand meets the same.
 *
 * Expected (docs/guides/jobs.md, "What BullMQ sees"): a job that "moves itself and throws
 * BullMQ's `DelayedError` (its step jobs idiom…)" sees "the same as without the library: what
 * it did so far commits, its key stays unfinished, and its next run goes on". The data
 * comparison of a `key` is for "the same key with other data" from another job; the guide's
 * own text for the job's id says "a job may update its own, `job.updateData`".
 *
 * Control: the same step job keyed by its id (no `key`) completes with both steps, and the
 * same keyed job without the library completes.
 *
 * Severity: medium (a job failed for good with its first step committed; no effect twice).
 */
import { onRedis } from '../../support/job-queues.js';
import { settled, useAdv55 } from '../../support/adv55-fixture.js';

onRedis('adversary 55: a keyed step job', () => {
  const adv = useAdv55('adv55_keyed_step');

  it('control: keyed by its id, the step job completes with both steps', async () => {
    await adv.startWorker({ MODE: 'steps', QUEUE: 'steps-id', STEP_DELAY_MS: '300' });
    const { queue } = adv.queueOf('steps-id');
    const job = await queue.add('order', { orderId: 'id-1' });
    const end = await settled(queue, job.id!);
    expect(end.state).toBe('completed');
    expect(await adv.steps('id-1')).toEqual(['first', 'second']);
  });

  it('control: keyed by its order without the library, it completes with both steps', async () => {
    await adv.startWorker({
      MODE: 'steps',
      QUEUE: 'steps-plain',
      KEYED: '1',
      IDEMPOTENT: '0',
      STEP_DELAY_MS: '300',
    });
    const { queue } = adv.queueOf('steps-plain');
    const job = await queue.add('order', { orderId: 'plain-1' });
    const end = await settled(queue, job.id!);
    expect(end.state).toBe('completed');
    expect(await adv.steps('plain-1')).toEqual(['first', 'second']);
  });

  it('keyed by its order, its data compared: the next step is refused, saying what to give', async () => {
    // Failed with the words of requests ("a different request (method, path or body)"): a
    // key of the app's compares the job's data, which the step idiom changes; the refusal
    // now says so and names the option (jobs.md, "Its key").
    await adv.startWorker({
      MODE: 'steps',
      QUEUE: 'steps-keyed',
      KEYED: '1',
      STEP_DELAY_MS: '300',
    });
    const { queue } = adv.queueOf('steps-keyed');
    const job = await queue.add('order', { orderId: 'keyed-1' }, { attempts: 3 });
    const end = await settled(queue, job.id!);
    expect(end.state).toBe('failed');
    expect(end.failedReason).toContain('give fingerprint: (job) => the part of its data');
    expect(await adv.steps('keyed-1')).toEqual(['first']);
  });

  it('keyed by its order with fingerprint: its intent, its next step goes on', async () => {
    const worker = await adv.startWorker({
      MODE: 'steps',
      QUEUE: 'steps-keyed-intent',
      KEYED: '1',
      FINGERPRINT: 'order',
      STEP_DELAY_MS: '300',
    });
    const { queue } = adv.queueOf('steps-keyed-intent');
    const job = await queue.add('order', { orderId: 'keyed-2' }, { attempts: 3 });
    const end = await settled(queue, job.id!);
    expect({ state: end.state, reason: end.failedReason }).toEqual({
      state: 'completed',
      reason: undefined,
    });
    expect(await adv.steps('keyed-2')).toEqual(['first', 'second']);
    expect(worker.output()).toContain('ran steps-keyed-intent');
  });
});
