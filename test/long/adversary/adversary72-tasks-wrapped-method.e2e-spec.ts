/**
 * Adversary 72: an `@IdempotentTask()` method that carries another wrapping method decorator
 * (timing, tracing, an ORM's request context) never runs: `@nestjs/schedule` ticks it every
 * second, start-up passes, and every tick fails with "the library did not find this object at
 * start-up ... import IdempotencyModule.forRoot(...)", which the app does. Two stacks:
 *  - `@Cron()` above `@Timed()` above `@IdempotentTask()`, `@Timed()` an ordinary wrapper that
 *    copies no metadata (the kind ORMs show under `@Cron()` for scheduled work, e.g. MikroORM's
 *    `@CreateRequestContext()`);
 *  - `@Traced()` above `@Cron()` above `@IdempotentTask()`, `@Traced()` a wrapper that DOES copy
 *    the metadata over (as tracing libraries do, e.g. nestjs-otel's `@Span()`, so that the
 *    decorators below still count): the well-behaved case fails too;
 *  - (the same root) a subclass overriding a base class's `@Cron()` + `@IdempotentTask()` method
 *    with its own, which calls `super.sync()`: the base's wrapper, run inside the subclass's
 *    tick, looks itself up, is not found, and throws: the subclass's tick fails, every second.
 *
 * Why: `IdempotentTasks.onModuleInit` (lib/tasks/idempotent-tasks.service.ts) resolves a task
 * from the OUTERMOST function, `instance[name]` (the one `@nestjs/schedule` registers), and keys
 * it by that function (`found.set(method, task)`); the library's wrapper, inside, looks itself
 * up (lib/tasks/idempotent-task.decorator.ts: `runner.tick(this, tick, ...)`, then `tickNow`:
 * `this.tasks.get(instance)?.get(method)`). With `@Timed()` between, the outer function has no
 * `IDEMPOTENT_TASK_OPTIONS` (they sit on the inner wrapper): the object is never bound and
 * `taskRunnerOf(this)` is undefined. With `@Traced()` on top, the outer function has them: the
 * task is found and bound under `traced`, but the tick looks it up under the inner wrapper,
 * finds nothing, and throws `IdempotentTaskUnboundError`. Every tick of every replica. (Only a
 * wrapper below `@IdempotentTask()` works: the library's wrapper is then the outermost.)
 *
 * Expected (docs/guides/schedule.md): "Put it on the scheduled method (above or below
 * `@Cron()`, the same)"; each tick runs once across replicas. Either the ticks run (the task
 * found by the function `@nestjs/schedule` ticks, whatever wraps the library's wrapper), or
 * start-up refuses with words that name the cause, not "import IdempotencyModule", which is
 * imported.
 *
 * Control: the same three decorators with the wrapper innermost (`@Cron()`,
 * `@IdempotentTask()`, `@Timed()`): a tick runs every second.
 *
 * Severity: medium-high (a task that never runs, for decorator stacks tracing and ORM
 * libraries document; loud, but with wrong words; start-up passes).
 *
 * Fails now: 'ran 0; every tick threw: @IdempotentTask() on TimedBetween.settle: the library
 * did not find this object at start-up ...' and 'ran 0; every tick threw: @IdempotentTask() on
 * TracedOnTop: the library did not find this object at start-up ...'; for the subclass, 'ran
 * 0; every tick threw: ...' (the base's wrapper's `IdempotentTaskUnboundError`).
 *
 * Fixed: the decorator notes its wrapper by the prototype and name it was declared on
 * (`declareTask`, lib/tasks/task-registry.ts), and start-up binds the task under that wrapper,
 * found by the method's name whatever wraps it, its schedule read where `@nestjs/schedule`
 * reads it; a base class's task called by its override's tick runs as part of that tick.
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

/**
 * A wrapping decorator that carries the metadata over to its wrapper (as tracing libraries'
 * do, e.g. nestjs-otel's `@Span()`, so that `@Cron()` below it still counts).
 */
function Traced(): MethodDecorator {
  return (_target, _property, descriptor: PropertyDescriptor) => {
    const inner = descriptor.value as (...args: unknown[]) => Promise<unknown>;
    const traced = async function traced(this: unknown, ...args: unknown[]) {
      return await inner.apply(this, args);
    };
    for (const key of Reflect.getMetadataKeys(inner)) {
      Reflect.defineMetadata(key, Reflect.getMetadata(key, inner), traced);
    }
    descriptor.value = traced;
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

@Injectable()
class TracedOnTop {
  @Traced()
  @Cron('* * * * * *', { name: 'adv72-traced-on-top' })
  @IdempotentTask()
  async settle() {
    ran('on-top');
    await pool.query('SELECT 1');
  }
}

/** A base class's task, overridden by a subclass that calls it (`super.sync()`). */
abstract class BaseSync {
  @Cron('* * * * * *', { name: 'adv72-base-sync' })
  @IdempotentTask()
  async sync() {
    ran('super');
    await pool.query('SELECT 1');
  }
}

@Injectable()
class ChildSync extends BaseSync {
  @Cron('* * * * * *', { name: 'adv72-child-sync' })
  @IdempotentTask()
  override async sync() {
    await super.sync();
  }
}

/** The outcome of `tickFor` in words: the assertions' message. */
function outcomeOf(result: { refused: string | undefined; runs: number }): string {
  if (result.refused !== undefined) {
    return /import IdempotencyModule/.test(result.refused)
      ? `refused with wrong words: ${result.refused}`
      : 'refused';
  }
  if (result.runs >= 2) return 'ticks ran';
  const error = errors.find((e) => /IdempotentTask/.test(e)) ?? errors[0] ?? 'nothing logged';
  return `ran ${result.runs}; every tick threw: ${error}`;
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
    expect(outcomeOf(result)).toMatch(/^(refused|ticks ran)$/);
  }, 60_000);

  it('a subclass overriding the task and calling super: each tick runs', async () => {
    const result = await tickFor(ChildSync, 'super', 3_300);
    expect(outcomeOf(result)).toMatch(/^(refused|ticks ran)$/);
  }, 60_000);

  it('@Traced() on top, copying the metadata: each tick runs', async () => {
    const result = await tickFor(TracedOnTop, 'on-top', 3_300);
    expect(outcomeOf(result)).toMatch(/^(refused|ticks ran)$/);
  }, 60_000);
});
