/**
 * Adversary 63: a replica shut down gracefully (SIGTERM, the docs' worker with
 * `app.enableShutdownHooks()`: a rolling deploy, a scale-down) while a tick runs stops renewing
 * the tick's lease though the tick is alive and goes on to its end: another replica takes the
 * tick over and runs it again, concurrently. Its work outside the database happens twice.
 *
 * The app: the docs' worker (createApplicationContext, TypeORM, `enableShutdownHooks()`), one
 * task `@Cron('*\/2 * * * * *', { name: 'settle' })` + `@IdempotentTask()` (heartbeat on, the
 * default; the module's `leaseMs` 3000). Its tick prints `begun <slot>`, works HOLD_MS (8 s on
 * replica A, 0 on B), then prints `finished <slot>` (the mail sent, the file uploaded: work
 * done after the wait). Replica A is sent SIGTERM just after its tick began.
 *
 * What happens: Nest's shutdown hooks run `app.close()`: `@nestjs/schedule` stops its timers
 * and TypeORM destroys its DataSource (`pool.end()`), which waits for the tick's checked-out
 * client, so the process stays up and the tick runs on to its end. But the heartbeat
 * (`LeaseRenewals.heartbeat` from `runSlot`, lib/tasks/idempotent-tasks.service.ts) renews
 * apart from the tick's transaction (`store.extendLease`, a new pool client): "Cannot use a
 * pool after calling end on the pool", every renewal. The lease runs out 3 s later while the
 * tick is alive; B's next tick sweeps (`resumeLeftovers`, UNFINISHED_TICKS: started, lease past)
 * and runs the slot resumed, to its end. A's tick also ends (`finished`), its commit fenced out.
 * Nothing in the library waits for, or holds the lease of, a tick in flight at shutdown.
 *
 * Expected (docs/guides/schedule.md): "The lease is renewed while the tick runs (`heartbeat`, on
 * by default)"; "fires on several replicas | one runs it ... the others skip it"; only a
 * replica that dies (SIGKILL, a crash) has its tick resumed. A is alive, finishing the tick.
 * (Not `heartbeat: false`, whose cost is documented: here the heartbeat is on.)
 *
 * Control: the same, A not sent SIGTERM: its heartbeat keeps the lease, B skips the slot, and
 * the slot's work runs once.
 *
 * Severity: medium (effects outside the database twice on every graceful shutdown mid-tick
 * that outlasts the lease: every deploy of a worker whose ticks take longer than `leaseMs`).
 *
 * Fixed: `IdempotentTasks.beforeApplicationShutdown` waits for the ticks running, before the
 * pool is ended (TypeORM ends its own after that hook), and no tick starts once shutdown began.
 */
import { startAdv60Replica } from '../../support/adv60-replicas.js';
import { sleep } from '../../support/adv59-app.js';
import { useTaskReplicas } from '../../support/task-replicas.js';
import { until } from '../../support/brokers.js';

describe('adversary 63: a graceful shutdown while a tick runs', () => {
  const replicas = useTaskReplicas('adv63_shutdown');
  beforeEach(() => replicas.reset());

  async function tickThrough(sigterm: boolean) {
    const env = { CRON: '*/2 * * * * *', LEASE_MS: '3000' };
    const a = await startAdv60Replica(replicas, { ...env, REPLICA: 'a', HOLD_MS: '8000' });
    await until(() => Promise.resolve(/^begun /m.test(a.output())), 'a tick on A', 10_000);
    const slot = /^begun (\S+)/m.exec(a.output())![1];
    const b = await startAdv60Replica(replicas, { ...env, REPLICA: 'b' });
    if (sigterm) a.child.kill('SIGTERM');
    // A's tick ends 8 s after it began (SIGTERM or not); B sweeps every 2 s meanwhile.
    await until(
      () => Promise.resolve(a.output().includes(`finished ${slot}`) || a.child.exitCode !== null),
      "A's tick to end",
      30_000,
    );
    await sleep(1_000);
    await Promise.all([a.kill(), b.kill()]);
    const finished = (out: string) =>
      out.split('\n').filter((line) => line === `finished ${slot}`).length;
    return { onA: finished(a.output()), onB: finished(b.output()) };
  }

  it('control: A alive to the end of its tick, the tick runs once', async () => {
    const { onA, onB } = await tickThrough(false);
    expect(onA).toBe(1);
    expect(onB).toBe(0);
  }, 60_000);

  it('A shut down gracefully mid-tick: the tick, still running on A, is not run on B', async () => {
    const { onA, onB } = await tickThrough(true);
    expect(onA).toBe(1);
    // Fails: B took the tick over once A's lease ran out (its heartbeat on an ended pool),
    // and ran it to its end while A did too.
    expect(onB).toBe(0);
  }, 60_000);
});
