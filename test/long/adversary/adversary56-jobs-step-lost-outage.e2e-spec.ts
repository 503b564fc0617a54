/**
 * Adversary 56: a step whose commit is cut by a database outage, whose lost-step note cannot
 * be written either (the database is still down), is forgotten: the job's next run goes on to
 * step two and completes, told done with step one's work lost.
 *
 * The app: a processor running BullMQ's step idiom under `@IdempotentJob()` (keyed by its id,
 * the default): step one inserts a row, `job.updateData({ step: 'second' })`,
 * `job.moveToDelayed(ts, token)`, `throw new DelayedError()`; step two inserts its row and
 * returns. The database goes down as step one ends (its sessions ended, new connections
 * refused: a failover, a restart), and comes back two seconds later.
 *
 * What happens: `keepStep` (lib/jobs/idempotent-jobs.service.ts, the COMMIT of
 * RELEASE_JOB_STEP fails, the work rolled back) then writes MARK_JOB_STEP_LOST through the
 * same database, which is down: the `.catch` logs "the lost step ... could not be noted" and
 * the DelayedError goes on. Nothing says the step was lost: in Redis the job's data says step
 * two; in PostgreSQL its key is started, its first run's lease running out. Once the lease is
 * out, its next run takes the key over (its own, no step owner: `stepHold` lets it go on),
 * runs step two, and the job completes. Step one's row is not there.
 *
 * Expected (docs/guides/jobs.md, "What BullMQ sees"): "moves itself, but its step cannot
 * commit ... its next run fails for good, saying the step did not commit: its data says the
 * step was done, and going on would lose it"; the table's database row: "meets a database
 * that fails in passing ... moved to the delayed set, ... nothing of it committed" — never
 * completed without its step.
 *
 * Control: the same job, no outage, completes with both steps.
 *
 * Severity: high (a job told done while its work is lost).
 *
 * Fixed: a step commits as the job moves itself (`steppedJob`, lib/jobs/job-steps.ts), and the
 * data the job gives `updateData()` meanwhile reaches BullMQ only once its work committed: an
 * outage before the move refuses the move (the job, rolled back with its data, runs step one
 * again once the database is back); one after it finds the step committed.
 */
import { Client } from 'pg';
import { until } from '../../support/brokers.js';
import { adminUrl } from '../../support/database.js';
import { onRedis } from '../../support/job-queues.js';
import { settled, useAdv55 } from '../../support/adv55-fixture.js';

const WORKER = 'test/support/adv56-worker.js';

onRedis('adversary 56: a step lost to a database outage', () => {
  const adv = useAdv55('adv56_step_lost_outage');

  it('control: without an outage, both steps commit', async () => {
    await adv.startWorker({ QUEUE: 'fine', STEP_DELAY_MS: '300', LEASE_MS: '3000' }, WORKER);
    const { queue } = adv.queueOf('fine');
    const job = await queue.add('order', { orderId: 'fine-1' });
    expect((await settled(queue, job.id!)).state).toBe('completed');
    expect(await adv.steps('fine-1')).toEqual(['first', 'second']);
  });

  // Its step commits as the job moves itself (`moveToDelayed`), and its data reaches BullMQ
  // only once its work committed: an outage after the move finds the step committed; one
  // before it refuses the move, and the job, rolled back with its data, runs step one again.
  it.each([
    ['after its move: the step committed as it moved', '1'],
    [
      'before its move: the move refused, step one run again once the database is back',
      'before-move',
    ],
  ])(
    'a step cut by an outage %s: both steps, once each',
    async (_name, outageAt) => {
      const queueName = `outage-${outageAt}`;
      const worker = await adv.startWorker(
        {
          QUEUE: queueName,
          STEP_DELAY_MS: '300',
          LEASE_MS: '3000',
          OUTAGE: outageAt,
          ADMIN_URL: adminUrl(),
        },
        WORKER,
      );
      const { queue } = adv.queueOf(queueName);
      const job = await queue.add('order', { orderId: queueName });
      await until(() => Promise.resolve(worker.output().includes('outage')), 'the outage', 20_000);
      await new Promise((resolve) => setTimeout(resolve, 2_000));
      const name = adv.admin().database!;
      const server = new Client({ connectionString: adminUrl() });
      await server.connect();
      await server.query(`ALTER DATABASE ${name} ALLOW_CONNECTIONS true`);
      await server.end();
      const end = await settled(queue, job.id!, 40_000);
      expect({ state: end.state, rows: await adv.steps(queueName) }).toEqual({
        state: 'completed',
        rows: ['first', 'second'],
      });
    },
    60_000,
  );
});
