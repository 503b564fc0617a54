/**
 * Adversary 73: an `@IdempotentTask()` method that reaches its provider by TypeScript's
 * `applyMixins` pattern (the handbook's "Mixins, alternative pattern": the mixin class's
 * prototype members copied onto the provider's prototype with `Object.defineProperty`) never
 * runs: `@nestjs/schedule` ticks it (its `@Cron()` metadata is on the copied method), and every
 * tick throws `IdempotentTaskUnboundError` ("... import IdempotencyModule"), which the app does;
 * start-up passes. A regression of round 72's fix: the method carries the library's metadata
 * (`SetMetadata(IDEMPOTENT_TASK_OPTIONS, ...)` on the wrapper) as before, and was bound by it.
 *
 * The app: one replica; `class Settlement { @Cron('0 0 0 1 1 *', { name, disabled: true })
 * @IdempotentTask({ name }) async settle() {...} }`, copied onto `@Injectable() class Jobs {}`
 * with `applyMixins(Jobs, [Settlement])` (typed by `interface Jobs extends Settlement {}`).
 * The job fired by hand (`SchedulerRegistry.getCronJob(name).fireOnTick()`).
 *
 * Why: start-up now finds a task by `declaredTask(instance, name)` (lib/tasks/task-registry.ts),
 * which walks the instance's PROTOTYPE CHAIN for the prototype the decorator ran on
 * (`declareTask(target, property, tick)` in lib/tasks/idempotent-task.decorator.ts): the mixin's
 * prototype is not on the provider's chain, its members were copied, so `declaredTask` is
 * undefined, `onModuleInit` (lib/tasks/idempotent-tasks.service.ts) `continue`s past the method
 * and never calls `bindTasks`; the wrapper's `taskRunnerOf(this)` is undefined at each tick.
 * Before the fix, the options were read off the method itself (`Reflect.getMetadata(
 * IDEMPOTENT_TASK_OPTIONS, method)`), which the copy carries (by the diff of 541e3ea; not run).
 *
 * Expected (docs/guides/schedule.md): "Put it on the scheduled method (above or below
 * `@Cron()`, the same; under another wrapping decorator ... too ...), with
 * `IdempotencyModule` and `ScheduleModule` imported in the app": the tick runs, once.
 *
 * Control: the same class provided by inheritance (`class Jobs extends Settlement`) runs.
 *
 * Severity: medium (a scheduled task that never runs, in an app whose start-up passed; the
 * error's advice, import IdempotencyModule, points the wrong way).
 *
 * Fails now: ran 0, IdempotentTaskUnboundError logged; control passes.
 *
 * Fixed: a method not declared on its class's own chain but carrying the options itself is
 * its own task, as before round 72 (`onModuleInit`, lib/tasks/idempotent-tasks.service.ts).
 */
import 'reflect-metadata';
import { Injectable, type LoggerService, Module, type Type } from '@nestjs/common';
import { NestFactory } from '@nestjs/core';
import { Cron, ScheduleModule, SchedulerRegistry } from '@nestjs/schedule';
import { Pool } from 'pg';
import { IdempotencyModule, IdempotentTask } from '../../../lib/index.js';
import { createMigratedDatabase, type MigratedDatabase } from '../../support/migrated-database.js';

let database: MigratedDatabase;
let pool: Pool;
const ran: string[] = [];
const errors: string[] = [];
const logger: LoggerService = {
  log: () => undefined,
  warn: () => undefined,
  debug: () => undefined,
  verbose: () => undefined,
  error: (message: unknown) => {
    errors.push(message instanceof Error ? message.message : String(message));
  },
};

/** The TypeScript handbook's `applyMixins`, as written there. */
function applyMixins(derivedCtor: Type, constructors: Type[]) {
  constructors.forEach((baseCtor) => {
    Object.getOwnPropertyNames(baseCtor.prototype).forEach((name) => {
      Object.defineProperty(
        derivedCtor.prototype,
        name,
        Object.getOwnPropertyDescriptor(baseCtor.prototype, name) || Object.create(null),
      );
    });
  });
}

class MixedSettlement {
  @Cron('0 0 0 1 1 *', { name: 'adv73-mixin', disabled: true })
  @IdempotentTask({ name: 'adv73-mixin' })
  async settle() {
    ran.push('adv73-mixin');
  }
}

// The handbook's typing of a mixed-in class: a class and an interface of one name.
/* eslint-disable @typescript-eslint/no-unsafe-declaration-merging, @typescript-eslint/no-empty-object-type */
@Injectable()
class MixedJobs {}
interface MixedJobs extends MixedSettlement {}
/* eslint-enable @typescript-eslint/no-unsafe-declaration-merging, @typescript-eslint/no-empty-object-type */
applyMixins(MixedJobs, [MixedSettlement]);

class InheritedSettlement {
  @Cron('0 0 0 1 1 *', { name: 'adv73-inherited', disabled: true })
  @IdempotentTask({ name: 'adv73-inherited' })
  async settle() {
    ran.push('adv73-inherited');
  }
}

@Injectable()
class InheritedJobs extends InheritedSettlement {}

async function fire(provider: Type, name: string): Promise<string[]> {
  ran.length = 0;
  errors.length = 0;
  @Module({
    imports: [ScheduleModule.forRoot(), IdempotencyModule.forRoot({ globalKeys: true, pool })],
    providers: [provider],
  })
  class AppModule {}
  const app = await NestFactory.createApplicationContext(AppModule, { logger });
  await app.init();
  try {
    await Promise.resolve(app.get(SchedulerRegistry).getCronJob(name).fireOnTick()).catch(
      (error: unknown) => errors.push(String(error)),
    );
    for (let i = 0; i < 30 && ran.length === 0; i++) {
      await new Promise((resolve) => setTimeout(resolve, 100));
    }
    return [...ran];
  } finally {
    await app.close();
  }
}

describe('adversary 73: a task copied onto its provider by applyMixins', () => {
  beforeAll(async () => {
    database = await createMigratedDatabase('adv73_applied_mixin');
    pool = new Pool({ connectionString: database.url, max: 4 });
  }, 60_000);

  afterAll(async () => {
    await pool?.end();
    await database?.drop();
  });

  it('control: the same task by inheritance runs its tick', async () => {
    expect(await fire(InheritedJobs, 'adv73-inherited')).toEqual(['adv73-inherited']);
    expect(errors).toEqual([]);
  }, 30_000);

  it('the task copied by applyMixins runs its tick', async () => {
    const runs = await fire(MixedJobs, 'adv73-mixin');
    // Fails: ran [] and errors ['IdempotentTaskUnboundError ... import IdempotencyModule ...'].
    expect({ runs, errors }).toEqual({ runs: ['adv73-mixin'], errors: [] });
  }, 30_000);
});
