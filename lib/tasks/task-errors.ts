import { TICK_TENANT_PREFIX } from '../decisions/tenant-id.js';
import { InvalidIdempotencyOptionsError } from '../idempotency-options.js';
import { characterCount } from '../decisions/well-formed.js';

/** A task's method without a schedule to key its ticks by: refused at start-up. */
export class IdempotentTaskUnscheduledError extends InvalidIdempotencyOptionsError {
  constructor(where: string, timeout: boolean) {
    super(
      timeout
        ? `@IdempotentTask() on ${where}: a @Timeout() runs once on each replica as it starts, ` +
            'with no scheduled time to tell its runs apart; use @Cron() or @Interval(), or ' +
            'run it on one replica'
        : `@IdempotentTask() on ${where} needs @Cron() or @Interval() (from @nestjs/schedule) ` +
            'on the same method: its ticks are keyed by their scheduled time',
    );
    this.name = 'IdempotentTaskUnscheduledError';
  }
}

/** A task's `@Interval()` whose period Node would not keep (it would run every 1 ms). */
export class IdempotentTaskPeriodError extends InvalidIdempotencyOptionsError {
  constructor(where: string, everyMs: unknown) {
    super(
      `@IdempotentTask() on ${where}: its @Interval() period (${String(everyMs)}) is not a ` +
        'number of milliseconds from 1 to 2147483647, so Node would run it every 1 ms and its ' +
        'ticks could not be keyed by their window: give @Interval() such a period (an unset ' +
        'environment variable read with Number() is NaN)',
    );
    this.name = 'IdempotentTaskPeriodError';
  }
}

/** A task's method with more than one schedule: `@nestjs/schedule` runs only one of them. */
export class IdempotentTaskSchedulesError extends InvalidIdempotencyOptionsError {
  constructor(where: string, decorators: readonly string[]) {
    super(
      `@IdempotentTask() on ${where} has ${decorators.join(' and ')}: @nestjs/schedule runs ` +
        'only the one above the others, and its ticks would be keyed by another; keep one ' +
        'schedule on the method (a method of its own for each)',
    );
    this.name = 'IdempotentTaskSchedulesError';
  }
}

/** A task whose name does not fit a key's tenant (`schedule:<name>`, 255 characters). */
export class IdempotentTaskNameTooLongError extends InvalidIdempotencyOptionsError {
  constructor(where: string, name: string) {
    super(
      `@IdempotentTask() on ${where}: its name (${characterCount(name)} characters, from the option, the ` +
        "schedule's name or Class.method) is too long to key its ticks by: give it a name of " +
        'at most 246 characters (@IdempotentTask({ name }))',
    );
    this.name = 'IdempotentTaskNameTooLongError';
  }
}

/** Two tasks of one app under one name: their ticks would be one task's. */
export class IdempotentTaskNameTakenError extends InvalidIdempotencyOptionsError {
  constructor(task: { where: string; tenant: string }, other: string) {
    super(
      `@IdempotentTask() on ${task.where}: ${other} is a task of the same name ` +
        `(${task.tenant.slice(TICK_TENANT_PREFIX.length)}), and the two would run one tick between ` +
        "them: give each its own name (@IdempotentTask({ name }), or the schedule's name)",
    );
    this.name = 'IdempotentTaskNameTakenError';
  }
}

/**
 * A plain override of a base's task given a schedule of its own (`@Cron()` on the override,
 * no `@IdempotentTask()`): `@nestjs/schedule` ticks the override on every replica, and the
 * base's task it calls through `super` is not a tick of its own. Refused at start-up.
 */
export class IdempotentTaskOverrideError extends InvalidIdempotencyOptionsError {
  constructor(where: string, base: string) {
    super(
      `${where} overrides ${base}, an @IdempotentTask(), with a schedule of its own but ` +
        'without @IdempotentTask(): its ticks would run on every replica. Put ' +
        '@IdempotentTask() on the override too (its ticks are then keyed by its own name and ' +
        'schedule, and super runs the base’s work in them), or take its schedule off',
    );
    this.name = 'IdempotentTaskOverrideError';
  }
}

/**
 * A task whose object the library did not bind at start-up: its app does not import
 * `IdempotencyModule`, or the object is none of its providers or controllers.
 */
export class IdempotentTaskUnboundError extends Error {
  constructor(where: string) {
    super(
      `@IdempotentTask() on ${where}: the library did not find this object at start-up, so ` +
        'its ticks cannot be run once across replicas: import IdempotencyModule.forRoot(...) ' +
        'in the app module, and run the task on a provider or a controller of the app (the ' +
        'tick did not run)',
    );
    this.name = 'IdempotentTaskUnboundError';
  }
}
