/**
 * Adversary 63: with the module's `storeIf: (status) => status < 500` (the setting options.md
 * offers, "to let clients retry a server error"), a tick that throws is run again: by every
 * replica whose timer fires for its slot after it failed, and by each later tick of the task
 * (its sweep), for the whole `resumeWithinMs`. The docs say a tick that throws is not run again.
 *
 * The app: the docs' worker (createApplicationContext, TypeORM, `IdempotencyModule.forRoot({
 * globalKeys: true, storeIf: (status) => status < 500 })`: the HTTP routes' choice), one task
 * `@Cron('*\/2 * * * * *', { name: 'settle' })` + `@IdempotentTask()` whose tick does its work
 * (prints `begun <slot>`: the mail, the alert) and throws. No `PhaseRunner`. Two replicas, the
 * second's timer 400 ms behind the first's (as adversary 60).
 *
 * What happens: A's tick throws; `runSlot` (lib/tasks/idempotent-tasks.service.ts) keeps its
 * failure by `commitAnswer(..., tickFailed(cause), true)` (lib/transaction/commit-answer.ts),
 * whose `storePlan(500, true, options.storeIf)` (lib/transaction/store-plan.ts) is
 * 'not-stored': the module's HTTP `storeIf` is applied to the tick's own failure record. The
 * transaction rolls back and `releaseQuietly(..., false)` runs RELEASE: the key stays `started`
 * with `locked_until = NULL`. B's timer fires 400 ms later for the same slot: CLAIM finds a
 * key given back, `decide` takes it over (resumes) and runs the tick again; and every later
 * tick's `resumeLeftovers` (UNFINISHED_TICKS: started, lease NULL) takes it again: the fix of
 * adversary 60 (both breaks) undone by an option the app set for its routes.
 *
 * Expected (docs/guides/schedule.md, "The rules"): "throws | ... its failure kept as its
 * answer ...: it is not run again, on this replica or another whose timer fires for it later".
 * Nothing says `storeIf` applies to ticks (the guide's Options list `name, resumeWithinMs,
 * leaseMs, heartbeat, isolationLevel`; "the rest as a route's").
 *
 * Control: the same replicas without `storeIf`: each failing slot runs once.
 *
 * Severity: high (a failing tick's work repeated on every replica and on every later tick for
 * an hour, under a documented module option many apps set).
 *
 * Fixed: a job's or a tick's record is always kept (`headlessOwnerTools`: the module's
 * `storeIf` chooses among HTTP answers only).
 */
import { runsBySlot, startAdv60Replica } from '../../support/adv60-replicas.js';
import { sleep } from '../../support/adv59-app.js';
import { useTaskReplicas } from '../../support/task-replicas.js';

describe('adversary 63: a tick that throws, under storeIf (status) => status < 500', () => {
  const replicas = useTaskReplicas('adv63_store_if');
  beforeEach(() => replicas.reset());

  async function runTwoReplicas(storeIf: boolean) {
    const env = { CRON: '*/2 * * * * *', FAIL: '1', ...(storeIf ? { STORE_IF: 'below500' } : {}) };
    const a = await startAdv60Replica(replicas, { ...env, REPLICA: 'a' });
    const b = await startAdv60Replica(replicas, { ...env, REPLICA: 'b', CLOCK_SKEW_MS: '-400' });
    await sleep(6_500);
    await Promise.all([a.kill(), b.kill()]);
    const runs = runsBySlot(a, b);
    // Slots both replicas were up for (the first and the last may have met only one of them).
    const slots = [...runs.keys()].sort().slice(1, -1);
    return { slots: slots.length, runs: slots.map((slot) => runs.get(slot)), output: a.output() };
  }

  it('control: without storeIf, a failing tick runs once per slot', async () => {
    const { slots, runs } = await runTwoReplicas(false);
    expect(slots).toBeGreaterThanOrEqual(1);
    expect(runs).toEqual(runs.map(() => 1));
  }, 60_000);

  it('with storeIf refusing 5xx, a failing tick is still not run again', async () => {
    const { slots, runs } = await runTwoReplicas(true);
    expect(slots).toBeGreaterThanOrEqual(1);
    // Fails: each slot ran on A, again on B 400 ms later, and again on later ticks' sweeps.
    expect(runs).toEqual(runs.map(() => 1));
  }, 60_000);
});
