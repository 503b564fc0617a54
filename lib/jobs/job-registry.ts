/** What runs a processor's `@IdempotentJob()` methods (`IdempotentJobs`), by shape. */
export interface JobRunner {
  run(
    where: string,
    options: object,
    job: never,
    token: string | undefined,
    work: () => Promise<unknown>,
  ): Promise<unknown>;
}

/** The runner of each processor instance, bound by its module at start-up. */
const runners = new WeakMap<object, JobRunner>();
/** Jobs that came before their processor was bound (BullMQ's worker may start first). */
const waiting = new WeakMap<object, ((runner: JobRunner) => void)[]>();

/** Binds `instance`'s `@IdempotentJob()` methods to `runner` (its app's module). */
export function bindJobs(instance: object, runner: JobRunner): void {
  runners.set(instance, runner);
  for (const resolve of waiting.get(instance) ?? []) resolve(runner);
  waiting.delete(instance);
}

/**
 * The runner bound to `instance`; waits `waitMs` for it (a worker of `@nestjs/bullmq` starts as
 * its module initializes, maybe before the library's), then `undefined`.
 */
export function runnerOf(instance: object, waitMs: number): Promise<JobRunner | undefined> {
  const bound = runners.get(instance);
  if (bound) return Promise.resolve(bound);
  return new Promise((resolve) => {
    const timer = setTimeout(() => resolve(undefined), waitMs);
    const list = waiting.get(instance) ?? [];
    list.push((runner) => {
      clearTimeout(timer);
      resolve(runner);
    });
    waiting.set(instance, list);
  });
}
