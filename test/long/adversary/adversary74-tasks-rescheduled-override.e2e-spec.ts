/**
 * Adversary 74: a subclass that gives a base's task another schedule (its override carries
 * `@Cron()` of its own and calls `super`, without repeating `@IdempotentTask()`) never runs
 * its work: every tick, on every replica, throws `IdempotentTaskUnboundError` ("the library
 * did not find this object at start-up ... import IdempotencyModule.forRoot(...)"), which
 * `@nestjs/schedule` logs; the app does import it. Nothing fails at start-up.
 *
 * The app: a shared `SettlementTask { @Cron('0 0 * * * *') @IdempotentTask({ name:
 * 'adv74-settle' }) async settle() }` and, in this app, `NightlySettlement extends
 * SettlementTask { @Cron('0 0 2 * * *', { name: 'adv74-nightly' }) override async settle() {
 * return super.settle(); } }` (the same once-per-tick work on a nightly schedule), provided
 * alone.
 *
 * Why: `onModuleInit` (lib/tasks/idempotent-tasks.service.ts) reads the override through
 * `declaredTask` (lib/tasks/task-registry.ts), which takes the class whose own method it is
 * (the subclass, which has no wrapper) and so finds no task on the object; it is never bound
 * (`bindTasks`). `@nestjs/schedule` ticks the override, whose `super.settle()` is the base's
 * wrapper: `taskRunnerOf(this)` is undefined and it throws, every tick. Suggested fix: at
 * start-up, where the method `@nestjs/schedule` ticks is a plain override over a base's
 * task, either bind the object and key its ticks by the override's schedule (the base's
 * options, as the docs' "a subclass's override that calls `super` runs its base's work in
 * its own tick"), or refuse the app at start-up, saying to put `@IdempotentTask()` on the
 * override, never fail each tick with an error that points at the module import.
 *
 * Expected (docs/guides/schedule.md): "`@IdempotentTask()` runs each tick once"; "a
 * subclass's override that calls `super` runs its base's work in its own tick"; and a
 * misplaced decorator is refused at start-up ("`@Timeout()` is refused at start-up ..., and
 * so is a method with no schedule"), not at every tick.
 *
 * Control: the same override with `@IdempotentTask()` repeated on it runs its tick.
 *
 * Severity: medium (the task never runs; no start-up error; the error logged at each tick
 * names the wrong cause).
 *
 * Fails now: the tick throws IdempotentTaskUnboundError and nothing ran; control passes.
 *
 * Fixed: the reviewer's second route: such an app is refused at start-up with
 * `IdempotentTaskOverrideError` (`overriddenTask` in task-registry.ts, checked in
 * `onModuleInit`), which says to put `@IdempotentTask()` on the override or take its schedule
 * off. Keying the override's ticks by the base's options would make a plain override a task,
 * which adversary 73 ruled out (a plain override of a base's task is not a task); the test now
 * expects the refusal, not a tick.
 */
import 'reflect-metadata';
import { Injectable, Module, type Type } from '@nestjs/common';
import { NestFactory } from '@nestjs/core';
import { Cron, ScheduleModule, SchedulerRegistry } from '@nestjs/schedule';
import { Pool } from 'pg';
import { IdempotencyModule, IdempotentTask } from '../../../lib/index.js';
import { createMigratedDatabase, type MigratedDatabase } from '../../support/migrated-database.js';

let database: MigratedDatabase;
let pool: Pool;
const ran: string[] = [];

@Injectable()
class SettlementTask {
  @Cron('0 0 * * * *', { name: 'adv74-settle', disabled: true })
  @IdempotentTask({ name: 'adv74-settle' })
  async settle() {
    ran.push('settled');
  }
}

@Injectable()
class NightlySettlement extends SettlementTask {
  // Another schedule for the same work: `super` runs the base's task.
  @Cron('0 0 2 * * *', { name: 'adv74-nightly', disabled: true })
  override async settle() {
    return super.settle();
  }
}

@Injectable()
class DecoratedNightly extends SettlementTask {
  @Cron('0 0 2 * * *', { name: 'adv74-nightly', disabled: true })
  @IdempotentTask({ name: 'adv74-nightly' })
  override async settle() {
    return super.settle();
  }
}

async function tick(provider: Type): Promise<string> {
  ran.length = 0;
  @Module({
    imports: [ScheduleModule.forRoot(), IdempotencyModule.forRoot({ globalKeys: true, pool })],
    providers: [provider],
  })
  class AppModule {}
  const app = await NestFactory.createApplicationContext(AppModule, { logger: false });
  await app.init();
  try {
    // What `@nestjs/schedule` calls as the nightly timer fires (the job's own callback).
    await app.get(provider).settle();
    return `ran ${ran.join(',')}`;
  } catch (error) {
    return `tick failed: ${(error as Error).name}; ran ${ran.join(',')}`;
  } finally {
    await app.close();
  }
}

describe('adversary 74: a subclass re-scheduling a base task with a plain @Cron() override', () => {
  beforeAll(async () => {
    database = await createMigratedDatabase('adv74_rescheduled_override');
    pool = new Pool({ connectionString: database.url, max: 4 });
  }, 60_000);

  afterAll(async () => {
    await pool?.end();
    await database?.drop();
  });

  it('control: the override with @IdempotentTask() repeated runs its tick', async () => {
    expect(await tick(DecoratedNightly)).toBe('ran settled');
  }, 30_000);

  it('the plain @Cron() override calling super is refused at start-up, saying what to do', async () => {
    // Failed: 'tick failed: IdempotentTaskUnboundError; ran ' (the work never ran, nothing
    // said so at start-up). Now the app does not start, and says to decorate the override.
    await database.dataSource.query('DELETE FROM idempotency_keys');
    const started = tick(NightlySettlement);
    await expect(started).rejects.toMatchObject({ name: 'IdempotentTaskOverrideError' });
    await expect(started).rejects.toThrow(
      /NightlySettlement\.settle overrides SettlementTask\.settle, an @IdempotentTask\(\), .*Put @IdempotentTask\(\) on the override too/,
    );
    expect(ran).toEqual([]);
  }, 30_000);

  it('and @nestjs/schedule does schedule the override', async () => {
    @Module({ imports: [ScheduleModule.forRoot()], providers: [NightlySettlement] })
    class ScheduleOnly {}
    const app = await NestFactory.createApplicationContext(ScheduleOnly, { logger: false });
    await app.init();
    try {
      expect(app.get(SchedulerRegistry).getCronJob('adv74-nightly')).toBeDefined();
    } finally {
      await app.close();
    }
  }, 30_000);
});
