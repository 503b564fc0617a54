import { InvalidIdempotencyOptionsError } from '../idempotency-options.js';

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

/** A task whose module does not import `IdempotencyModule`: its ticks cannot run once. */
export class IdempotentTaskUnboundError extends Error {
  constructor(where: string) {
    super(
      `@IdempotentTask() on ${where}: IdempotencyModule is not imported in this app, so its ` +
        'ticks cannot be run once across replicas: import IdempotencyModule.forRoot(...) in ' +
        'the app module (the tick did not run)',
    );
    this.name = 'IdempotentTaskUnboundError';
  }
}
