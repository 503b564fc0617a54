/**
 * Adversary 56: with `oneCommit: true`, a step whose COMMIT fails leaves no key behind for its
 * lost-step note to land on before the job's next run claims the key afresh: that run goes on
 * to step two and completes, told done with step one's work lost.
 *
 * The app: a processor running BullMQ's step idiom under `@IdempotentJob({ oneCommit: true })`
 * (keyed by its id), its worker at concurrency 2: step one inserts a row,
 * `job.updateData({ step: 'second' })`, `job.moveToDelayed(Date.now(), token)` (its next step
 * at once), `throw new DelayedError()`; step two inserts its row and returns. The `steps` table
 * has a deferred constraint trigger (checked at COMMIT, ~700 ms) that refuses this order's
 * step one (as a deferred foreign key, a serialization failure, a lost connection would).
 *
 * What happens: the job's next run starts while step one's COMMIT is in flight; its claim (the
 * first statement of its transaction, `claimWithWork`) waits on step one's uncommitted claim
 * row (`claimWaitMs`). Step one's COMMIT fails: its claim rolls back with its work, and the
 * waiting run's INSERT now claims a fresh key: no step owner, no lost-step note (`stepHold`
 * lets it go on). `keepStep` (lib/jobs/idempotent-jobs.service.ts) writes MARK_JOB_STEP_LOST
 * only after: its UPDATE sees no committed started row, its INSERT meets the new run's
 * conflicting row and does nothing (ON CONFLICT DO NOTHING). Step two commits; the job completes.
 *
 * Expected (docs/guides/jobs.md, "What BullMQ sees"): "moves itself, but its step cannot
 * commit (a constraint checked at COMMIT): its next run fails for good, saying the step did
 * not commit: its data says the step was done, and going on would lose it".
 *
 * Control: the same job without `oneCommit` (its claim committed first, its lease held while
 * its step commits) fails for good, saying the step did not commit.
 *
 * Severity: high (a job told done while its work is lost).
 *
 * Fixed: the step commits as the job moves itself, before it moved (`steppedJob`): a refused
 * commit refuses the move, so no next run waits on the claim while the job moved on.
 */
import { onRedis } from '../../support/job-queues.js';
import { settled, useAdv55 } from '../../support/adv55-fixture.js';

const WORKER = 'test/support/adv56-worker.js';

onRedis('adversary 56: a oneCommit step lost to its next run', () => {
  const adv = useAdv55('adv56_one_commit_step_race');

  beforeAll(async () => {
    // Checked at COMMIT, slowly: step one of an order named bad-… is refused.
    await adv.admin().query(`CREATE FUNCTION slow_check() RETURNS trigger LANGUAGE plpgsql AS $$
      BEGIN
        PERFORM pg_sleep(0.7);
        IF NEW.order_id LIKE 'bad-%' THEN RAISE EXCEPTION 'step one of % refused', NEW.order_id; END IF;
        RETURN NULL;
      END $$`);
    await adv.admin().query(`CREATE CONSTRAINT TRIGGER a_slow_check AFTER INSERT ON steps
      DEFERRABLE INITIALLY DEFERRED FOR EACH ROW WHEN (NEW.step = 'first')
      EXECUTE FUNCTION slow_check()`);
  });

  it('control: without oneCommit, the lost step fails the job for good', async () => {
    await adv.startWorker({ QUEUE: 'plain', STEP_DELAY_MS: '0', CONCURRENCY: '2' }, WORKER);
    const { queue } = adv.queueOf('plain');
    const job = await queue.add('order', { orderId: 'bad-plain' });
    const end = await settled(queue, job.id!, 30_000);
    expect(end.state).toBe('failed');
    expect(end.failedReason).toMatch(/step/);
    expect(await adv.steps('bad-plain')).toEqual([]);
  }, 45_000);

  it('with oneCommit, a step that did not commit is not followed by the next one', async () => {
    await adv.startWorker(
      { QUEUE: 'one', STEP_DELAY_MS: '0', CONCURRENCY: '2', ONE_COMMIT: '1' },
      WORKER,
    );
    const { queue } = adv.queueOf('one');
    const job = await queue.add('order', { orderId: 'bad-one' });
    const end = await settled(queue, job.id!, 30_000);
    const rows = await adv.steps('bad-one');
    // Fails: 'completed' with rows ['second']: step one rolled back, the job told done.
    expect({ state: end.state, rows }).not.toEqual({ state: 'completed', rows: ['second'] });
    expect(end.state).not.toBe('completed');
  }, 45_000);
});
