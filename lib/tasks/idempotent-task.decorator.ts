import { Logger, SetMetadata } from '@nestjs/common';
import { IDEMPOTENT_TASK_OPTIONS } from '../shapes/idempotency.constants.js';
import { IdempotentTaskUnboundError } from './task-errors.js';
import { declareTask, taskRunnerOf } from './task-registry.js';
import { type IdempotentTaskOptions, resolveTaskOptions } from './idempotent-task.options.js';

/**
 * Runs each tick of a `@Cron()` or `@Interval()` method once across every replica of the app:
 * the tick is keyed by the task's name and its scheduled time; the replica that claims it runs
 * it, its database work and its record committing together, and the others skip it. A tick
 * whose replica died mid-way is resumed by a later tick of the task (after its lease, past
 * its last phase). Its repositories, `dataSource.query()` and the pool seam's clients join
 * its transaction, as on an `@Idempotent()` route; `PhaseRunner` works in it as there.
 *
 * Above or below `@Cron()`, the same.
 *
 * @example
 * @Cron('0 * * * * *')
 * @IdempotentTask()
 * async settle() {
 *   await this.ledger.insert({ kind: 'settlement', at: new Date() });
 * }
 */
export function IdempotentTask(options: IdempotentTaskOptions = {}): MethodDecorator {
  resolveTaskOptions(options, 'a task'); // validated now: a wrong option fails at start-up
  return (target, property, descriptor: PropertyDescriptor) => {
    const original = descriptor.value as (...args: unknown[]) => unknown;
    const where = `${target.constructor.name}.${String(property)}`;
    const tick = async function idempotentTask(this: object, ...args: unknown[]): Promise<void> {
      const runner = taskRunnerOf(this);
      if (!runner) {
        // `@nestjs/schedule` logs what a tick throws; the tick does not run unguarded.
        const error = new IdempotentTaskUnboundError(where);
        new Logger('Idempotency').error(error.message);
        throw error;
      }
      await runner.tick(this, tick, () => original.apply(this, args));
    };
    // What `@Cron()` below put on the method stays on it (`@Cron()` above puts it here).
    for (const key of Reflect.getOwnMetadataKeys(original)) {
      Reflect.defineMetadata(key, Reflect.getOwnMetadata(key, original), tick);
    }
    Object.defineProperty(tick, 'name', { value: original.name });
    declareTask(target, property, tick);
    descriptor.value = tick;
    SetMetadata(IDEMPOTENT_TASK_OPTIONS, options)(target, property, descriptor);
    return descriptor;
  };
}
