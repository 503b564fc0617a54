/**
 * Adversary 72: a tick that threw after its phase committed (`PhaseRunner.call`: the call out
 * made) and is taken over by another replica whose timer fires for the same slot a moment
 * later runs AS A RESUMED TICK (its phase's result replayed, the call not made again) but
 * tells its code `currentTick().resumed === false`. Code that checks `resumed` to look for
 * the half-done state of a tick (the docs' reason for the flag) takes it for a fresh one.
 *
 * The app: two replicas (two Nest apps on one database, the pool seam), one task named
 * `adv72-settle` (`@IdempotentTask({ name })`) on `@Cron('*\/2 * * * * *')`. Its tick pays
 * (`phases.call('paid', ...)`, counted), records `currentTick().resumed`, and on replica A's
 * first run throws after the call (a downstream refusal). Replica B's timer fires for the same
 * slot 400 ms after A's (its clock 400 ms behind, an event loop busy that long: the adversary-60
 * replicas; here B's job is `disabled` and fired with cron's `job.fireOnTick()` at that moment).
 *
 * Why: A's throw after a phase is given back with its phases (`rollBackAndRelease(...,
 * 'task_failed')` in `runSlot`, lib/tasks/idempotent-tasks.service.ts). B's tick claims the slot
 * on its ordinary path, `runSlot(task, key, false, work)`; `claimOrDecide` takes the key given
 * back over (its lock version 1, A's phase results on the claim), and `PhaseRunner` replays
 * `paid` from them; but the tick's `resumed` is the `resuming` ARGUMENT (`false`: set only by
 * `resumeLeftovers`), not whether the claim was a takeover. The same for a replica whose timer
 * fires for a slot after its first replica died and its lease ran out.
 *
 * Expected (docs/guides/schedule.md, "The rules"): a tick that died or threw after a phase is
 * resumed "after its last completed phase: a call out it made is not made again (its phase's
 * result kept), and `currentTick().resumed` is true"; "`currentTick()` ... gives `{ task, slot,
 * resumed }`".
 *
 * Control: the same tick resumed by the next tick of the task on its own replica
 * (`resumeLeftovers`) is told `resumed: true`; and in the failing case the phase's result is
 * kept (the call out made once for the slot), as it should.
 *
 * Severity: low-medium (no effect twice; code that branches on `resumed` to reconcile
 * half-done work skips it in the takeover that happens most often with replicas).
 *
 * Fails now: 'resumed false' for B's run, which replayed A's committed phase.
 *
 * Fixed: a tick whose claim was a takeover (its fencing token past the first claim's) is
 * told `resumed: true` (`runSlot`, lib/tasks/idempotent-tasks.service.ts).
 */
import 'reflect-metadata';
import { Inject, Injectable, Module } from '@nestjs/common';
import { NestFactory } from '@nestjs/core';
import { Cron, ScheduleModule, SchedulerRegistry } from '@nestjs/schedule';
import { Pool } from 'pg';
import { currentTick, IdempotencyModule, IdempotentTask, PhaseRunner } from '../../../lib/index.js';
import { createMigratedDatabase, type MigratedDatabase } from '../../support/migrated-database.js';

let database: MigratedDatabase;
let pool: Pool;
const calls: string[] = [];
const runs: { replica: string; slot: string; resumed: boolean }[] = [];
let aThrew: (slot: string) => void;
let aThrewOnce: Promise<string>;
let thrown = false;

beforeEach(() => {
  calls.length = 0;
  runs.length = 0;
  thrown = false;
  aThrewOnce = new Promise<string>((resolve) => (aThrew = resolve));
});

const REPLICA = 'adv72-replica';

async function settle(replica: string, phases: PhaseRunner): Promise<void> {
  const tick = currentTick()!;
  const slot = tick.slot.toISOString();
  await phases.call('paid', async ({ idempotencyKey }) => {
    calls.push(`${slot} ${idempotencyKey}`);
    return { transfer: 'tr_1' };
  });
  runs.push({ replica, slot, resumed: tick.resumed });
  if (replica === 'a' && !thrown) {
    thrown = true;
    aThrew(slot);
    throw new Error('the ledger refused the payout');
  }
}

@Injectable()
class SettleA {
  constructor(private readonly phases: PhaseRunner) {}

  @Cron('*/2 * * * * *', { name: 'adv72-a' })
  @IdempotentTask({ name: 'adv72-settle' })
  async settle() {
    await settle('a', this.phases);
  }
}

@Injectable()
class SettleB {
  constructor(
    private readonly phases: PhaseRunner,
    @Inject(REPLICA) private readonly replica: string,
  ) {}

  // Its timer fires when the test says (`fireOnTick`), 400 ms after A's for the same slot.
  @Cron('*/2 * * * * *', { name: 'adv72-b', disabled: true })
  @IdempotentTask({ name: 'adv72-settle' })
  async settle() {
    await settle(this.replica, this.phases);
  }
}

@Injectable()
class ControlSettle {
  constructor(private readonly phases: PhaseRunner) {}

  @Cron('*/2 * * * * *', { name: 'adv72-control' })
  @IdempotentTask({ name: 'adv72-control' })
  async settle() {
    await settle('a', this.phases);
  }
}

async function replica(provider: new (...args: never[]) => object) {
  @Module({
    imports: [ScheduleModule.forRoot(), IdempotencyModule.forRoot({ globalKeys: true, pool })],
    providers: [provider, { provide: REPLICA, useValue: 'b' }],
  })
  class AppModule {}
  const app = await NestFactory.createApplicationContext(AppModule, { logger: [] });
  await app.init();
  return app;
}

describe('adversary 72: a tick taken over by a late replica after its phase committed', () => {
  beforeAll(async () => {
    database = await createMigratedDatabase('adv72_resumed_flag');
    pool = new Pool({ connectionString: database.url, max: 6 });
  }, 60_000);

  afterAll(async () => {
    await pool?.end();
    await database?.drop();
  });

  it('control: resumed by the next tick of the task, the tick is told it is resumed', async () => {
    const a = await replica(ControlSettle);
    try {
      const slot = await aThrewOnce;
      for (let i = 0; i < 50 && runs.filter((run) => run.slot === slot).length < 2; i++) {
        await new Promise((resolve) => setTimeout(resolve, 100));
      }
      const resumedRun = runs.filter((run) => run.slot === slot)[1];
      expect(resumedRun).toBeDefined();
      expect(calls.filter((call) => call.startsWith(slot))).toHaveLength(1);
      expect(`resumed ${resumedRun.resumed}`).toBe('resumed true');
    } finally {
      await a.close();
    }
  }, 60_000);

  it('B runs the slot after its kept phase, and is told it is resumed', async () => {
    const b = await replica(SettleB);
    const a = await replica(SettleA);
    try {
      const slot = await aThrewOnce;
      await new Promise((resolve) => setTimeout(resolve, 400));
      const job = b.get(SchedulerRegistry).getCronJob('adv72-b');
      await job.fireOnTick();
      // B's tick runs in the background of fireOnTick: wait for its run of the slot.
      for (let i = 0; i < 50 && !runs.some((run) => run.replica === 'b'); i++) {
        await new Promise((resolve) => setTimeout(resolve, 100));
      }
      const bRun = runs.find((run) => run.replica === 'b' && run.slot === slot);
      // Control: B's run is the slot's, and the call out is not made again (its phase kept).
      expect(bRun).toBeDefined();
      expect(calls.filter((call) => call.startsWith(slot))).toHaveLength(1);
      // Fails: 'resumed false' (the takeover on the ordinary claim path).
      expect(`resumed ${bRun!.resumed}`).toBe('resumed true');
    } finally {
      await a.close();
      await b.close();
    }
  }, 60_000);
});
