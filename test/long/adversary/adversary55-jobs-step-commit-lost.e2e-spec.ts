/**
 * Adversary 55: a step whose commit PostgreSQL refuses is dropped in silence, and the job goes
 * on to its next step and completes: told done with its first step's work lost.
 *
 * The app: a processor running BullMQ's step idiom
 * (https://docs.bullmq.io/patterns/process-step-jobs) under `@IdempotentJob()` (keyed by its
 * id): step one inserts a row, `job.updateData({ step: 'second' })`,
 * `job.moveToDelayed(ts, token)`, `throw new DelayedError()`; step two inserts its row and
 * returns. The row's account is a foreign key checked at COMMIT (`DEFERRABLE INITIALLY
 * DEFERRED`, an ordinary schema), and this order's account does not exist. (The same holds for
 * anything that fails at COMMIT: a serialization failure under `isolationLevel:
 * 'SERIALIZABLE'`, a connection lost, a lease lost.)
 *
 * What happens: the job's step is committed after the job has already moved itself (its data
 * says step two, it sits in the delayed set). The COMMIT fails; `keepStep`
 * (lib/jobs/idempotent-jobs.service.ts) rolls the work back, logs "could not commit", and
 * throws the `DelayedError` on as if it had committed. BullMQ runs step two, which commits,
 * and the job completes: BullMQ says done, step one's row is not there.
 *
 * Expected (docs/guides/jobs.md, "What BullMQ sees"): a job that moves itself and throws
 * `DelayedError` sees "the same as without the library: what it did so far commits"; and a job
 * whose work did not commit "runs again" — never "completed" without it. Without the library
 * the refused write fails the job at step one (its error, its attempts), and it is never told
 * done.
 *
 * Control: the same job without the library fails at step one, nothing done; the same job
 * with an account that exists completes with both steps.
 *
 * Severity: high (a job told done while its work is lost).
 */
import { onRedis } from '../../support/job-queues.js';
import { settled, useAdv55 } from '../../support/adv55-fixture.js';

onRedis('adversary 55: a step whose commit fails', () => {
  const adv = useAdv55('adv55_step_commit_lost');

  it('control: without the library, the refused write fails the job at step one', async () => {
    await adv.startWorker({ MODE: 'steps', QUEUE: 'plain', IDEMPOTENT: '0', STEP_DELAY_MS: '300' });
    const { queue } = adv.queueOf('plain');
    const job = await queue.add('order', { orderId: 'plain-1', account: 'missing' });
    const end = await settled(queue, job.id!);
    expect(end.state).toBe('failed');
    expect(end.failedReason).toMatch(/foreign key/);
    expect(await adv.steps('plain-1')).toEqual([]);
  });

  it('control: with an account that exists, both steps commit', async () => {
    await adv.startWorker({ MODE: 'steps', QUEUE: 'fine', STEP_DELAY_MS: '300' });
    const { queue } = adv.queueOf('fine');
    const job = await queue.add('order', { orderId: 'fine-1' });
    expect((await settled(queue, job.id!)).state).toBe('completed');
    expect(await adv.steps('fine-1')).toEqual(['first', 'second']);
  });

  it('a step that did not commit is not followed by the next one (the job is not done)', async () => {
    const worker = await adv.startWorker({ MODE: 'steps', QUEUE: 'lost', STEP_DELAY_MS: '300' });
    const { queue } = adv.queueOf('lost');
    const job = await queue.add('order', { orderId: 'lost-1', account: 'missing' });
    const end = await settled(queue, job.id!);
    const rows = await adv.steps('lost-1');
    // Fails: 'completed' with rows ['second']: step one rolled back, the job told done.
    expect({ state: end.state, rows }).not.toEqual({ state: 'completed', rows: ['second'] });
    expect(end.state).not.toBe('completed');
    expect(worker.output()).toContain('ran lost');
  });
});
