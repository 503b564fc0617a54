/**
 * Adversary 60: a tick resumed after its replica died, that throws, is run again on every
 * later tick of the task, for the whole `resumeWithinMs` (an hour by default): the docs say a
 * tick that throws is not run again.
 *
 * The app: the docs' worker (createApplicationContext, TypeORM), one task `@Cron('*\/2 * * *
 * * *', { name: 'settle' })` + `@IdempotentTask()` (the module's `leaseMs` 1500). Its tick
 * does its work (prints `begun <slot>`: the mail, the alert) and, on replica B, throws when it
 * runs resumed (`currentTick().resumed`: say the state it finds half-done is one it refuses,
 * or a downstream refusal that lasts). No `PhaseRunner` in it.
 *
 * What happens: replica A is SIGKILLed mid-tick (slot S). Its lease runs out; B's next tick
 * sweeps (`resumeLeftovers`, UNFINISHED_TICKS: `state = 'started'` and the lease NULL or
 * past) and takes S over (TAKE_OVER: `lock_version` 1). The resumed run throws; `runSlot`
 * calls `rollBackAndRelease(..., 'task_failed', true)`, but RELEASE forgets only a key's
 * first claim (`lock_version = 0`): this one stays `started` with `locked_until = NULL`,
 * which UNFINISHED_TICKS reads as free. B's next tick resumes it again, and the next, every
 * tick until the slot is `resumeWithinMs` old: 1,800 runs of a tick every two seconds, 60 of a
 * minutely one, each one's effects outside the database repeated and an error logged. Five
 * such keys (RESUMED_PER_TICK, oldest first) also keep every later leftover from resuming.
 *
 * Expected (docs/guides/schedule.md, "The rules"): "throws | its work rolled back, its key
 * forgotten: it is not run again"; only "a tick that throws after a phase of it committed
 * (`PhaseRunner`) keeps its key". This one committed no phase.
 *
 * Control: the same crash with a resumed run that succeeds: S is resumed once and done.
 *
 * Severity: medium (a failed tick run again and again for an hour, effects and all; only after a
 * replica died mid-tick).
 *
 * Fixed: as adversary60-tasks-failed-tick-rerun; a tick with a phase committed is resumed
 * until it has been taken over three times (`resumesAfterFailure`), then its failure is kept.
 */
import { runsBySlot, startAdv60Replica } from '../../support/adv60-replicas.js';
import { sleep } from '../../support/adv59-app.js';
import { useTaskReplicas } from '../../support/task-replicas.js';
import { until } from '../../support/brokers.js';

describe('adversary 60: a resumed tick that throws', () => {
  const replicas = useTaskReplicas('adv60_resumed_throw');
  beforeEach(() => replicas.reset());

  async function crashThenResume(failResumed: boolean) {
    const env = { CRON: '*/2 * * * * *', LEASE_MS: '1500' };
    const a = await startAdv60Replica(replicas, { ...env, REPLICA: 'a', HOLD_MS: '60000' });
    await until(() => Promise.resolve(/^begun /m.test(a.output())), 'a tick on A', 10_000);
    const slot = /^begun (\S+)/m.exec(a.output())![1];
    await a.kill();
    const b = await startAdv60Replica(replicas, {
      ...env,
      REPLICA: 'b',
      FAIL_RESUMED: failResumed ? '1' : '0',
    });
    await sleep(9_000);
    await b.kill();
    const resumedRuns = b
      .output()
      .split('\n')
      .filter((line) => line === `begun ${slot} resumed`);
    return { resumedRuns: resumedRuns.length, laterSlots: runsBySlot(b).size - 1 };
  }

  it('control: resumed and succeeding, it runs once more', async () => {
    const { resumedRuns, laterSlots } = await crashThenResume(false);
    expect(laterSlots).toBeGreaterThanOrEqual(3);
    expect(resumedRuns).toBe(1);
  }, 60_000);

  it('resumed and throwing, it is not run again', async () => {
    const { resumedRuns, laterSlots } = await crashThenResume(true);
    expect(laterSlots).toBeGreaterThanOrEqual(3);
    // Fails: run again on each of B's ticks (4 or 5 times in 9 s).
    expect(resumedRuns).toBe(1);
  }, 60_000);
});
