/**
 * Adversary 74: an app that gives its task's provider a second token with Nest's own alias
 * (`{ provide: SETTLER, useExisting: SettlementTask }`, the ordinary way to inject a class
 * under an interface's token) no longer starts: `IdempotentTaskNameTakenError`
 * (SettlementTask.settle and SettlementTask.settle "a task of the same name"), for ONE
 * object and ONE method.
 *
 * The app: `SettlementTask { @Interval(60_000) @IdempotentTask({ name: 'adv74-alias' })
 * async settle() }`, provided as itself and aliased under a token
 * (`{ provide: 'SETTLER', useExisting: SettlementTask }`), with `IdempotencyModule` and
 * `ScheduleModule` imported.
 *
 * Why: `onModuleInit` (lib/tasks/idempotent-tasks.service.ts) walks every provider wrapper of
 * `DiscoveryService.getProviders()`; Nest makes an alias a factory provider whose instance is
 * the aliased object itself, so the same instance is visited twice, and the second visit
 * finds its own task's name in `names` (`names.get(task.tenant)`) and throws, as if two
 * objects held two tasks. Suggested fix: skip an instance already seen (a `Set` of instances,
 * or `tasks.has(instance)`) before reading its methods; `wrapper.isAlias` also tells it.
 *
 * Expected (docs/guides/schedule.md): "Two tasks of one name in one app stop it at start-up":
 * here there is one task on one object; nothing in the docs refuses an aliased provider. The
 * app starts, and a tick runs once.
 *
 * Control: the same app without the alias starts and runs its tick.
 *
 * Severity: medium (a permanent false refusal at start-up of an ordinary program).
 *
 * Fails now: start-up throws IdempotentTaskNameTakenError; control passes.
 *
 * Fixed: an object met under a second token (`useExisting`) is scanned once (`seen` in
 * `IdempotentTasks.onModuleInit`).
 */
import 'reflect-metadata';
import { Injectable, Module, type Provider } from '@nestjs/common';
import { NestFactory } from '@nestjs/core';
import { Interval, ScheduleModule } from '@nestjs/schedule';
import { Pool } from 'pg';
import { IdempotencyModule, IdempotentTask } from '../../../lib/index.js';
import { createMigratedDatabase, type MigratedDatabase } from '../../support/migrated-database.js';

let database: MigratedDatabase;
let pool: Pool;
const ran: string[] = [];

@Injectable()
class SettlementTask {
  // A long period: the test calls the tick itself (as a timer would), once.
  @Interval(600_000)
  @IdempotentTask({ name: 'adv74-alias' })
  async settle() {
    ran.push('settled');
  }
}

async function start(providers: Provider[]): Promise<string> {
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
    await app.get(SettlementTask).settle();
    return `ran ${ran.join(',')}`;
  } finally {
    await app.close();
  }
}

describe('adversary 74: a task provider with an alias (useExisting)', () => {
  beforeAll(async () => {
    database = await createMigratedDatabase('adv74_alias_provider');
    pool = new Pool({ connectionString: database.url, max: 4 });
  }, 60_000);

  afterAll(async () => {
    await pool?.end();
    await database?.drop();
  });

  it('control: the task provider alone starts and runs its tick', async () => {
    expect(await start([SettlementTask])).toBe('ran settled');
  }, 30_000);

  it('with an alias of it, the app starts and the tick runs once', async () => {
    // Fails: 'start-up failed: IdempotentTaskNameTakenError'.
    await database.dataSource.query('DELETE FROM idempotency_keys');
    expect(await start([SettlementTask, { provide: 'SETTLER', useExisting: SettlementTask }])).toBe(
      'ran settled',
    );
  }, 30_000);
});
