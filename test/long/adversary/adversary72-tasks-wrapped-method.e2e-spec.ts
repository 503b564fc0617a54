/**
 * Adversary 72: an `@IdempotentTask()` method with another method decorator between it and
 * `@Cron()` (one that wraps the method: a timing, tracing or ORM request-context decorator,
 * the kind ORMs show under `@Cron()` for scheduled work, e.g. MikroORM's
 * `@CreateRequestContext()`) starts, is ticked by `@nestjs/schedule` every second, and every
 * tick fails with "the library did not find this object at start-up ... import
 * IdempotencyModule.forRoot(...)", which the app does. The task never runs; start-up passes.
 *
 * The app: `@Cron('* * * * * *', { name })` above `@Timed()` above `@IdempotentTask()`, where
 * `@Timed()` is an ordinary wrapping decorator (`descriptor.value = async function (...args) {
 * ... inner.apply(this, args) ... }`, copying no metadata, as most hand-written ones do).
 * Decorators apply bottom-up: `@IdempotentTask()` wraps the method and puts its options on its
 * wrapper; `@Timed()` wraps that wrapper; `@Cron()` puts its schedule on `@Timed()`'s function.
 *
 * Why: `IdempotentTasks.onModuleInit` (lib/tasks/idempotent-tasks.service.ts) finds tasks by
 * `Reflect.getMetadata(IDEMPOTENT_TASK_OPTIONS, instance[name])`, the OUTERMOST function (the
 * one `@nestjs/schedule` registers, by its own metadata); the options sit on the inner wrapper,
 * so the object is never bound (`bindTasks`) nor its task resolved. `@nestjs/schedule` ticks the
 * outer function, which calls the library's wrapper (lib/tasks/idempotent-task.decorator.ts):
 * `taskRunnerOf(this)` is undefined, it logs and throws `IdempotentTaskUnboundError`. Every tick
 * of every replica. (The order `@Cron()`, `@IdempotentTask()`, `@Timed()` works: the library's
 * wrapper copies what is on the function it wraps.)
 *
 * Expected (docs/guides/schedule.md): "Put it on the scheduled method (above or below
 * `@Cron()`, the same)"; a tick runs once across replicas. Either the tick runs (the wrapper
 * found at start-up, or resolved from the scheduled function as it ticks), or start-up refuses
 * with words that name the cause (a decorator between it and `@Cron()`), not "import
 * IdempotencyModule", which is imported.
 *
 * Control: the same three decorators with `@Timed()` innermost (`@Cron()`, `@IdempotentTask()`,
 * `@Timed()`): a tick runs every second.
 *
 * Severity: medium (a task that never runs, loudly but with wrong words, for a decorator stack
 * ORMs and tracing libraries document; start-up passes).
 *
 * Fails now: 'ran 0; every tick threw: @IdempotentTask() on TimedBetween.settle: the library
 * did not find this object at start-up ...'.
 */
import 'reflect-metadata';
import { Injectable, type LoggerService, Module } from '@nestjs/common';
import { NestFactory } from '@nestjs/core';
import { Cron, ScheduleModule } from '@nestjs/schedule';
import { Pool } from 'pg';
import { IdempotencyModule, IdempotentTask } from '../../../lib/index.js';
import { createMigratedDatabase, type MigratedDatabase } from '../../support/migrated-database.js';

let database: MigratedDatabase;
let pool: Pool;
const runs = new Map<string, number>();
const ran = (name: string) => runs.set(name, (runs.get(name) ?? 0) + 1);
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

/** An ordinary wrapping method decorator (timing; tracing, a request context: the same shape). */
function Timed(): MethodDecorator {
  return (_target, _property, descriptor: PropertyDescriptor) => {
    const inner = descriptor.value as (...args: unknown[]) => Promise<unknown>;
    descriptor.value = async function timed(this: unknown, ...args: unknown[]) {
      const began = performance.now();
      try {
        return await inner.apply(this, args);
      } finally {
        void (performance.now() - began);
      }
    };
    return descriptor;
  };
}

/** Starts an app with `provider`, lets it tick for `ms`; its runs, or why it would not start. */
async function tickFor(provider: new (...args: never[]) => object, name: string, ms: number) {
  errors.length = 0;
  @Module({
    imports: [ScheduleModule.forRoot(), IdempotencyModule.forRoot({ globalKeys: true, pool })],
    providers: [provider],
  })
  class AppModule {}
  let app;
  try {
    app = await NestFactory.createApplicationContext(AppModule, { logger });
    await app.init();
  } catch (error) {
    await app?.close().catch(() => undefined);
    return { refused: (error as Error).message, runs: runs.get(name) ?? 0 };
  }
  try {
    await new Promise((resolve) => setTimeout(resolve, ms));
  } finally {
    await app.close();
  }
  return { refused: undefined, runs: runs.get(name) ?? 0 };
}

@Injectable()
class TimedInside {
  @Cron('* * * * * *', { name: 'adv72-timed-inside' })
  @IdempotentTask()
  @Timed()
  async settle() {
    ran('inside');
    await pool.query('SELECT 1');
  }
}

@Injectable()
class TimedBetween {
  @Cron('* * * * * *', { name: 'adv72-timed-between' })
  @Timed()
  @IdempotentTask()
  async settle() {
    ran('between');
    await pool.query('SELECT 1');
  }
}

describe('adversary 72: a wrapping decorator between @Cron() and @IdempotentTask()', () => {
  beforeAll(async () => {
    database = await createMigratedDatabase('adv72_wrapped_method');
    pool = new Pool({ connectionString: database.url, max: 4 });
  }, 60_000);

  afterAll(async () => {
    await pool?.end();
    await database?.drop();
  });

  it('control: @Timed() innermost, a tick runs every second', async () => {
    const result = await tickFor(TimedInside, 'inside', 3_300);
    expect(result.refused).toBeUndefined();
    expect(result.runs).toBeGreaterThanOrEqual(2);
  }, 60_000);

  it('@Timed() between: each tick runs, or start-up refuses naming the cause', async () => {
    const result = await tickFor(TimedBetween, 'between', 3_300);
    const outcome =
      result.refused !== undefined
        ? /import IdempotencyModule/.test(result.refused)
          ? `refused with wrong words: ${result.refused}`
          : 'refused'
        : result.runs >= 2
          ? 'ticks ran'
          : `ran ${result.runs}; every tick threw: ${errors.find((e) => /IdempotentTask/.test(e)) ?? errors[0] ?? 'nothing logged'}`;
    expect(outcome).toMatch(/^(refused|ticks ran)$/);
  }, 60_000);
});
