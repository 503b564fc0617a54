/** What runs a provider's `@IdempotentTask()` methods (`IdempotentTasks`), by shape. */
export interface TaskRunner {
  tick(instance: object, method: object, work: () => unknown): Promise<void>;
}

/**
 * The runner of each provider instance, bound by its module at start-up: before
 * `@nestjs/schedule` starts its timers (at application bootstrap), so a tick always finds it.
 */
const byInstance = new WeakMap<object, TaskRunner>();

/** Binds `instance`'s `@IdempotentTask()` methods to `runner` (its app's module). */
export function bindTasks(instance: object, runner: TaskRunner): void {
  byInstance.set(instance, runner);
}

/** The runner bound to `instance`, if its app imports `IdempotencyModule`. */
export function taskRunnerOf(instance: object): TaskRunner | undefined {
  return byInstance.get(instance);
}
