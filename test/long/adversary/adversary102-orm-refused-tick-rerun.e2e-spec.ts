/**
 * Adversary 102 (orm): a `@Cron` + `@IdempotentTask()` tick whose work the seam refuses with
 * a never-stored refusal (`own` or `aborted` in `REFUSAL_FATES`: here `cursor_open`, a write per
 * streamed row) is run again by every replica whose timer fires after it: its failure is not
 * kept as the tick's answer, its key is given back (forgotten), and the next replica claims the
 * slot afresh. Adversary 60's rerun, back for the refusals: each run's effects outside the
 * database (the `begun` line: an email, an alert, a call not made through `PhaseRunner`) go out
 * once per replica.
 *
 * User code (the docs' worker, two replicas, the second's clock 400 ms behind):
 *
 *   @Cron('*\/2 * * * * *', { name: 'import' }) @IdempotentTask()
 *   async import() {
 *     console.log(`begun ${currentTick()!.slot.toISOString()}`);       // an email goes out
 *     const stream = await m.createQueryBuilder()...stream();
 *     for await (const row of stream) await m.query('INSERT ...', ...);  // refused: cursor_open
 *   }
 *
 * Code path: lib/tasks/idempotent-tasks.service.ts `runSlot` (its work threw, no phase
 * committed) → lib/transaction/commit-answer.ts `commitAnswer(..., tickFailed(cause), true)`
 * (keepsKey false) → `withoutEffects` → lib/transaction/failure.ts `refusalAnswer(transaction.
 * refusal)` (fate `own`) throws `TransactionAbortedError` → the catch rolls back and
 * `releaseQuietly` gives the key back (the first claim's row deleted): nothing kept for the
 * slot, and the later replica's claim inserts a new row and runs the tick again.
 *
 * Docs quote (docs/guides/schedule.md, "The rules"): "throws | its work rolled back, and its
 * failure kept as its answer (its error's words, `keys show`): it is not run again, on this
 * replica or another whose timer fires for it later"; "fires on several replicas | one runs
 * it (the first to claim its slot); the others skip it". docs/guides/schedule.md: "what the
 * seam refuses there ([transactions](transactions.md)) it refuses here".
 *
 * Severity: high (the tick's work, its effects outside the database, runs once per replica for
 * a slot: the documented once-per-slot promise, in the case adversary 60 fixed for a throw).
 *
 * Fails now (verified unskipped): the slots both replicas were up for began 7, 6 and 4 times
 * (runs [7, 6, 4], expected [1, 1, 1]): run again by the other replica and by the later ticks
 * that claim the given-back slot again. Control: the same tick reading the rows first (no refusal) runs
 * once per slot.
 *
 * Suggested fix: for a tick (no client to retry it "after the fix"), keep the refusal's answer
 * as the tick's failure (`tickFailed` stored without effects, `refusalAnswer`'s words) as for
 * any throw: `withoutEffects` may refuse to store the handler's own answer, but a tick's failure
 * record must still be kept; or have `runSlot` store `tickFailed` with the refusal's problem
 * when `commitAnswer` did not keep it.
 *
 * Fixed (session of 2026-12-06, sixth): a tick's failure record is kept without effects
 * whatever the refusal (`commitAnswer(..., recordsFailure)` → `withoutEffects(transaction,
 * true)` in lib/transaction/commit-answer.ts), in the refusal's words
 * (`tickFailed(refusalAnswer(transaction.refusal) ?? cause)` in lib/tasks/idempotent-tasks.
 * service.ts), whether the tick let the refusal out or caught it and returned (its COMMIT then
 * refused, and its failure kept the same way): not run again on any replica. Jobs are
 * unchanged (a refusal is an attempt, the key given back for BullMQ's next attempt, as
 * docs/guides/jobs.md says of any throw), and so are messages (a refusal counts a delivery).
 */
import { spawn } from 'node:child_process';
import { sleep } from '../../support/adv59-app.js';
import { until } from '../../support/brokers.js';
import { type TaskReplica, useTaskReplicas } from '../../support/task-replicas.js';
import { compiled } from '../../support/worker-process.js';

describe('adversary 102 orm: a tick the seam refuses, on two replicas', () => {
  const replicas = useTaskReplicas('adv102_refused_tick');
  const started: TaskReplica[] = [];
  beforeEach(() => replicas.reset());
  afterEach(async () => {
    await Promise.all(started.splice(0).map((replica) => replica.kill()));
  });

  async function startReplica(env: Record<string, string>): Promise<TaskReplica> {
    const child = spawn(
      process.execPath,
      [compiled('test/support/adv102-refused-tick-replica.js')],
      {
        env: { ...process.env, NODE_OPTIONS: '', DATABASE_URL: replicas.url(), ...env },
        stdio: ['ignore', 'pipe', 'pipe'],
      },
    );
    let output = '';
    child.stdout.on('data', (chunk: Buffer) => (output += chunk.toString()));
    child.stderr.on('data', (chunk: Buffer) => (output += chunk.toString()));
    const replica: TaskReplica = {
      child,
      output: () => output,
      kill: () =>
        new Promise<void>((resolve) => {
          if (child.exitCode !== null || child.signalCode !== null) return resolve();
          child.once('exit', () => resolve());
          child.kill('SIGKILL');
        }),
    };
    started.push(replica);
    await until(
      () => Promise.resolve(output.includes('ready') || child.exitCode !== null),
      'the replica to start',
      60_000,
    );
    if (child.exitCode !== null) throw new Error(`the replica exited:\n${output}`);
    return replica;
  }

  async function runTwoReplicas(refuse: boolean) {
    const env = { CRON: '*/2 * * * * *', REFUSE: refuse ? '1' : '0' };
    const a = await startReplica({ ...env, REPLICA: 'a' });
    const b = await startReplica({ ...env, REPLICA: 'b', CLOCK_SKEW_MS: '-400' });
    await sleep(6_500);
    await Promise.all([a.kill(), b.kill()]);
    const runs = new Map<string, number>();
    for (const replica of [a, b]) {
      for (const [, slot] of replica.output().matchAll(/^begun (\S+)/gm)) {
        runs.set(slot, (runs.get(slot) ?? 0) + 1);
      }
    }
    // Slots both replicas were up for (the first and the last may have met only one of them).
    const slots = [...runs.keys()].sort().slice(1, -1);
    return { slots: slots.length, runs: slots.map((slot) => runs.get(slot)), a, b };
  }

  it('control: a tick that reads its rows first (no refusal) runs once per slot', async () => {
    const { slots, runs } = await runTwoReplicas(false);
    expect(slots).toBeGreaterThanOrEqual(1);
    expect(runs).toEqual(runs.map(() => 1));
  }, 60_000);

  it('a tick the seam refused is not run again by the replica whose timer fires after it', async () => {
    const { slots, runs } = await runTwoReplicas(true);
    expect(slots).toBeGreaterThanOrEqual(1);
    expect(runs).toEqual(runs.map(() => 1));
  }, 60_000);
});
