/**
 * Adversary 59: two providers inheriting one `@Cron()` + `@IdempotentTask()` method from a
 * base class share ONE task key: each tick, one of them runs and the other is skipped, for
 * ever, silently.
 *
 * The app: an abstract `SyncTask` whose `sync()` is `@Cron('* * * * * *')` +
 * `@IdempotentTask()` (no name: the default `Class.method`), calling the subclass's
 * `source`; `UsersSync` and `OrdersSync` extend it, both providers. `@nestjs/schedule` gives
 * each instance its own cron job (schedule.explorer.js scans each instance's prototype chain,
 * unnamed jobs get a uuid).
 *
 * What happens: both subclasses' `sync` is the same function (the base's wrapper).
 * `IdempotentTasks.onModuleInit` (lib/tasks/idempotent-tasks.service.ts) calls `taskOf` with
 * `UsersSync.sync` first and caches the task BY METHOD (`this.tasks`, a WeakMap keyed by the
 * handler); `OrdersSync`'s call gets that cached task: tenant `schedule:UsersSync.sync` for
 * both. So each second both jobs fire, both claim `schedule:UsersSync.sync` + the same slot;
 * whichever claims first runs, the other finds it taken (in progress or done) and returns.
 * One of the two syncs never runs, or each runs about half of the seconds; no error, no
 * warning, and the default name the docs give (`Class.method`) says they are two tasks.
 * (Same family: two classes that share a name, e.g. a `TasksService.handleCron` in two
 * feature modules, key the same `schedule:TasksService.handleCron`; the same class provided
 * twice with different injected settings, too. A resumed tick of one is run by the other's
 * method.)
 *
 * Expected: each subclass's tick runs once per slot (its own key, `UsersSync.sync` and
 * `OrdersSync.sync`), or start-up refuses two tasks under one key with words.
 *
 * Control: the same two syncs as two classes, each declaring its own decorated method, both
 * run every second.
 *
 * Severity: high (a task silently never, or half of the times, runs; the class-inheritance
 * recipe Nest users reach for).
 *
 * Fixed: tasks are resolved per object and method at start-up, named by the object's class
 * (`IdempotentTasks.onModuleInit`); two tasks of one name in one app stop it at start-up
 * (`IdempotentTaskNameTakenError`).
 */
import { Inject, Injectable } from '@nestjs/common';
import { Cron } from '@nestjs/schedule';
import { type Pool } from 'pg';
import { IdempotentTask } from '../../../lib/index.js';
import { recordTick, sleep, startAdv59App, TICKS_POOL } from '../../support/adv59-app.js';
import { type TickRow, useTaskReplicas } from '../../support/task-replicas.js';

abstract class SyncTask {
  protected abstract readonly source: string;
  constructor(@Inject(TICKS_POOL) protected readonly pool: Pool) {}

  @Cron('* * * * * *')
  @IdempotentTask()
  sync() {
    return recordTick(this.pool, this.source);
  }
}

@Injectable()
class UsersSync extends SyncTask {
  protected readonly source = 'users';
}

@Injectable()
class OrdersSync extends SyncTask {
  protected readonly source = 'orders';
}

@Injectable()
class OwnUsersSync {
  constructor(@Inject(TICKS_POOL) private readonly pool: Pool) {}
  @Cron('* * * * * *')
  @IdempotentTask()
  sync() {
    return recordTick(this.pool, 'users');
  }
}

@Injectable()
class OwnOrdersSync {
  constructor(@Inject(TICKS_POOL) private readonly pool: Pool) {}
  @Cron('* * * * * *')
  @IdempotentTask()
  sync() {
    return recordTick(this.pool, 'orders');
  }
}

describe('adversary 59: two providers inheriting one @IdempotentTask() @Cron() method', () => {
  const replicas = useTaskReplicas('adv59_inherited');
  beforeEach(() => replicas.reset());

  /** Runs the app for `ms`; gives, per source, how many ticks it ran. */
  async function runFor(providers: unknown[], ms: number) {
    const { close } = await startAdv59App(replicas, { providers });
    await sleep(ms);
    await close();
    const rows: TickRow[] = await replicas.ticks();
    const count = (source: string) => rows.filter((row) => row.replica === source).length;
    return { users: count('users'), orders: count('orders') };
  }

  it('control: two classes, each its own decorated method: both run every second', async () => {
    const runs = await runFor([OwnUsersSync, OwnOrdersSync], 4_200);
    expect(runs.users).toBeGreaterThanOrEqual(3);
    expect(runs.orders).toBeGreaterThanOrEqual(3);
    expect(Math.abs(runs.users - runs.orders)).toBeLessThanOrEqual(1);
  }, 30_000);

  it('two subclasses of one scheduled base: both run every second', async () => {
    const runs = await runFor([UsersSync, OrdersSync], 4_200);
    // Fails: the two share the key schedule:UsersSync.sync; per second one runs, the other
    // is skipped (users + orders ~ one per second, not two).
    expect(runs.users).toBeGreaterThanOrEqual(3);
    expect(runs.orders).toBeGreaterThanOrEqual(3);
    expect(Math.abs(runs.users - runs.orders)).toBeLessThanOrEqual(1);
  }, 30_000);
});
