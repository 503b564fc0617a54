/**
 * Adversary 67: a tick whose COMMIT PostgreSQL refuses (a deferred foreign key, a deferred
 * unique or constraint trigger, a serialization failure at COMMIT under `isolationLevel:
 * 'SERIALIZABLE'`) is run again by every later tick of the task, on every replica, for the
 * whole `resumeWithinMs` (an hour by default): its work outside the database (the mail, the
 * alert, the file) again each time. The docs say a failed tick is not run again.
 *
 * The app: the docs' worker (createApplicationContext, TypeORM), one task
 * `@Cron('*\/2 * * * * *', { name: 'settle' })` + `@IdempotentTask()` (test/support/adv60-replica.ts):
 * its tick prints `begun <slot>` (its effect outside the database) and inserts rows into
 * `ticks`, whose `account` is a foreign key checked at COMMIT (`DEFERRABLE INITIALLY
 * DEFERRED`, an ordinary schema); the account is missing. One replica. No `PhaseRunner`.
 *
 * What happens: the tick's work does not throw; its COMMIT does. `runSlot`
 * (lib/tasks/idempotent-tasks.service.ts) stores TICK_DONE through `commitAnswer`
 * (lib/transaction/commit-answer.ts), whose catch rolls back and calls `releaseQuietly(...,
 * false)`: RELEASE leaves the key `started` with `locked_until = NULL` (nothing "forgotten",
 * no failure kept). `runSlot` throws "the tick of <slot> did not commit". The next tick's
 * `resumeLeftovers` (UNFINISHED_TICKS: started, lease NULL) takes the slot over and runs it
 * again (`resumed`), its commit refused again, released again; and the next tick, and so on:
 * `resumesAfterFailure`'s bound (three takeovers) is only on the path of a tick that threw.
 * Once five such slots are left, each tick re-runs the same five oldest (RESUMED_PER_TICK),
 * and a real crashed tick behind them is never resumed.
 *
 * Expected (docs/guides/schedule.md, "The rules"): "throws | its work rolled back, and its
 * failure kept as its answer: it is not run again, on this replica or another"; "meets a
 * database that fails | skipped, logged; the next tick runs" (the next tick, not this one
 * again). A tick resumes only after its replica died, or after a phase committed.
 *
 * Controls: the same tick throwing in its work (FAIL=1): each slot begun once (its failure
 * kept); and the account present (COMMIT passes): each slot once.
 *
 * Severity: high (a refused tick's outside effects repeated on every later tick for an hour:
 * 1,800 times for a tick every two seconds, 12 times for a five-minute one; a crashed tick's
 * resume starved behind five of them).
 *
 * Fixed: a tick whose COMMIT is refused keeps its failure as its answer, as a tick that throws
 * (`runSlot` in lib/tasks/idempotent-tasks.service.ts); after a phase committed it is resumed,
 * three takeovers at most.
 */
import { Client } from 'pg';
import { runsBySlot, startAdv60Replica } from '../../support/adv60-replicas.js';
import { sleep } from '../../support/adv59-app.js';
import { useTaskReplicas } from '../../support/task-replicas.js';

describe('adversary 67: a tick whose COMMIT is refused', () => {
  const replicas = useTaskReplicas('adv67_commit_refused');
  let admin: Client;

  beforeAll(async () => {
    admin = new Client({ connectionString: replicas.url() });
    // Ended by the database's drop, after the file (useTaskReplicas' afterAll).
    admin.on('error', () => undefined);
    await admin.connect();
    await admin.query(
      `CREATE TABLE accounts (id int PRIMARY KEY);
       ALTER TABLE ticks ADD COLUMN account int NOT NULL DEFAULT 1
         REFERENCES accounts (id) DEFERRABLE INITIALLY DEFERRED`,
    );
  }, 60_000);

  beforeEach(async () => {
    await replicas.reset();
    await admin.query('DELETE FROM accounts');
  });

  /** Runs one replica for ~7 s (three or four slots); how often each slot's work began. */
  async function runFor(env: Record<string, string>) {
    const a = await startAdv60Replica(replicas, {
      CRON: '*/2 * * * * *',
      REPLICA: 'a',
      ...env,
    });
    await sleep(7_000);
    await a.kill();
    if (process.env.ADV67_DEBUG) console.log(a.output());
    const runs = runsBySlot(a);
    return { slots: runs.size, mostRuns: Math.max(0, ...runs.values()), output: a.output() };
  }

  it('control: the account present, each slot runs once', async () => {
    await admin.query('INSERT INTO accounts (id) VALUES (1)');
    const { slots, mostRuns } = await runFor({});
    expect(slots).toBeGreaterThanOrEqual(3);
    expect(mostRuns).toBe(1);
  }, 60_000);

  it('control: a tick that throws in its work is not run again', async () => {
    await admin.query('INSERT INTO accounts (id) VALUES (1)');
    const { slots, mostRuns } = await runFor({ FAIL: '1' });
    expect(slots).toBeGreaterThanOrEqual(3);
    expect(mostRuns).toBe(1);
  }, 60_000);

  it('a tick whose COMMIT is refused is not run again by the later ticks', async () => {
    const { slots, mostRuns, output } = await runFor({});
    expect(slots).toBeGreaterThanOrEqual(3);
    // The commit was refused (the FK), as the replica's log says.
    expect(output).toMatch(/did not commit/);
    // Fails: the first slot is begun on its own tick and again, resumed, on each later one
    // (3 or 4 times in 7 s).
    expect(mostRuns).toBe(1);
  }, 60_000);
});
