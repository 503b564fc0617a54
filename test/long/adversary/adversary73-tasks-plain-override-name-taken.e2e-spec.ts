/**
 * Adversary 73: an app that provides a task's class AND a subclass whose override of the
 * task's method is a plain method (no `@Cron()`, no `@IdempotentTask()`: run by hand, or
 * scheduled elsewhere) no longer starts: `IdempotentTaskNameTakenError` (ManualSettlement.settle
 * and SettlementTask.settle "a task of the same name (adv73-settle), and the two would run one
 * tick between them"), for a method that is no task and that `@nestjs/schedule` does not
 * schedule. Before round 72's fix the override was not a task
 * (its own function carries no `@IdempotentTask()` metadata) and the app started.
 *
 * The app: `SettlementTask { @Cron('0 0 0 1 1 *', { name: 'adv73-settle', disabled: true })
 * @IdempotentTask() async settle() }` and `ManualSettlement extends SettlementTask { async
 * settle() { ... } }` (the same work without a schedule, for an admin endpoint), both
 * providers of one module.
 *
 * Why: `onModuleInit` (lib/tasks/idempotent-tasks.service.ts) now takes a method as a task
 * when `declaredTask(instance, name)` (lib/tasks/task-registry.ts) finds a wrapper ANYWHERE up
 * the instance's prototype chain, not when the method that runs is the wrapper: the base's
 * wrapper is found under the override's name, its options and (the override having no
 * schedule: `ticked = ... ? tick : method`) its schedule, named `adv73-settle` by the base's
 * `@Cron()`, are taken as ManualSettlement's task, which clashes with the base provider's.
 *
 * Expected (docs/guides/schedule.md): "Two tasks of one name in one app stop it at start-up";
 * here there is one task (`@nestjs/schedule` ticks only SettlementTask.settle): the app starts
 * and the tick runs once.
 *
 * Control: the same app without the subclass starts and runs the tick.
 *
 * Severity: low-medium (an app that ran before no longer starts after an upgrade; loud, at
 * start-up, naming a method that is no task).
 *
 * Fails now: start-up throws IdempotentTaskNameTakenError; control passes.
 *
 * Fixed: `declaredTask` (lib/tasks/task-registry.ts) reads the wrapper of the class whose
 * method it is only: a plain override is not a task.
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
  @Cron('0 0 0 1 1 *', { name: 'adv73-settle', disabled: true })
  @IdempotentTask()
  async settle() {
    ran.push('scheduled');
  }
}

@Injectable()
class ManualSettlement extends SettlementTask {
  // The same work, by hand, no schedule and no key (an admin endpoint calls it).
  override async settle() {
    ran.push('manual');
  }
}

async function start(providers: Type[]): Promise<string> {
  ran.length = 0;
  @Module({
    imports: [ScheduleModule.forRoot(), IdempotencyModule.forRoot({ globalKeys: true, pool })],
    providers,
  })
  class AppModule {}
  let app;
  try {
    app = await NestFactory.createApplicationContext(AppModule, { logger: false });
    await app.init();
  } catch (error) {
    await app?.close().catch(() => undefined);
    return `start-up failed: ${(error as Error).name}`;
  }
  try {
    await app.get(SchedulerRegistry).getCronJob('adv73-settle').fireOnTick();
    for (let i = 0; i < 30 && ran.length === 0; i++) {
      await new Promise((resolve) => setTimeout(resolve, 100));
    }
    return `ran ${ran.join(',')}`;
  } finally {
    await app.close();
  }
}

describe('adversary 73: a subclass with a plain override of a task method', () => {
  beforeAll(async () => {
    database = await createMigratedDatabase('adv73_plain_override');
    pool = new Pool({ connectionString: database.url, max: 4 });
  }, 60_000);

  afterAll(async () => {
    await pool?.end();
    await database?.drop();
  });

  it('control: the task class alone starts and runs its tick', async () => {
    expect(await start([SettlementTask])).toBe('ran scheduled');
  }, 30_000);

  it('with the subclass provided too, the app starts and the tick runs', async () => {
    // Fails: 'start-up failed: IdempotentTaskNameTakenError'.
    await database.dataSource.query('DELETE FROM idempotency_keys');
    expect(await start([SettlementTask, ManualSettlement])).toBe('ran scheduled');
  }, 30_000);
});
