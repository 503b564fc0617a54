/**
 * Adversary 55: a job whose COMMIT PostgreSQL refuses (a deferred foreign key) fails with the
 * reason "A statement of this request's transaction failed and the handler went on": words
 * that send its developer after a try/catch the job does not have, without the constraint's.
 *
 * The app: a one-step job under `@IdempotentJob()` that inserts a row whose account is a
 * foreign key checked at COMMIT (`DEFERRABLE INITIALLY DEFERRED`); the account does not exist.
 * The job catches nothing.
 *
 * What happens: the work is refused at the job's COMMIT (23503). `commitAnswer`
 * (lib/transaction/commit-answer.ts) turns it into the library's problem, and
 * `IdempotentJobs.runOnce` (lib/jobs/idempotent-jobs.service.ts, "A fault of the job's (a
 * statement failed and it went on)") throws its detail: BullMQ's failedReason is "the job's
 * result was not kept, nothing of it committed: A statement of this request's transaction
 * failed and the handler went on; nothing was committed or stored. Retrying runs the request
 * again." — HTTP words (request, handler), a cause that did not happen, and no word of the
 * constraint (it is only in a WARN log line of the worker).
 *
 * Expected (docs/guides/jobs.md, "What BullMQ sees"): a job that "throws" sees "its own error,
 * as without the library"; even the caught-statement row promises "the statement's words".
 * Without the library the job fails with PostgreSQL's: 'insert or update on table "steps"
 * violates foreign key constraint "steps_account_fkey"'.
 *
 * Control: the same job without the library: its reason names the constraint. (Attempts are
 * counted alike: both fail after 2.)
 *
 * Severity: low (words).
 */
import { onRedis } from '../../support/job-queues.js';
import { settled, useAdv55 } from '../../support/adv55-fixture.js';

onRedis('adversary 55: a job whose COMMIT is refused', () => {
  const adv = useAdv55('adv55_commit_refused_words');

  it('control: without the library, its reason names the constraint', async () => {
    await adv.startWorker({ MODE: 'steps', QUEUE: 'plain', IDEMPOTENT: '0' });
    const { queue } = adv.queueOf('plain');
    const job = await queue.add(
      'order',
      { orderId: 'plain-1', step: 'second', finalAccount: 'missing' },
      { attempts: 2 },
    );
    const end = await settled(queue, job.id!);
    expect(end.state).toBe('failed');
    expect(end.attemptsMade).toBe(2);
    expect(end.failedReason).toMatch(/violates foreign key constraint "steps_account_fkey"/);
  });

  it('with the library, its reason names the constraint, not a caught statement', async () => {
    await adv.startWorker({ MODE: 'steps', QUEUE: 'keyed' });
    const { queue } = adv.queueOf('keyed');
    const job = await queue.add(
      'order',
      { orderId: 'keyed-1', step: 'second', finalAccount: 'missing' },
      { attempts: 2 },
    );
    const end = await settled(queue, job.id!);
    expect(end.state).toBe('failed');
    expect(end.attemptsMade).toBe(2);
    expect(await adv.steps('keyed-1')).toEqual([]);
    // Fails: "… A statement of this request's transaction failed and the handler went on; …"
    expect(end.failedReason).not.toMatch(/the handler went on/);
    expect(end.failedReason).toMatch(/violates foreign key constraint "steps_account_fkey"/);
  });
});
