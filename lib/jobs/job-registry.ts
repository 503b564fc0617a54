/** What runs a processor's `@IdempotentJob()` methods (`IdempotentJobs`), by shape. */
export interface JobRunner {
  run(
    where: string,
    options: object,
    job: never,
    token: string | undefined,
    work: (job: object) => Promise<unknown>,
  ): Promise<unknown>;
}

/** The runner of each processor instance, bound by its module at start-up. */
const byInstance = new WeakMap<object, JobRunner>();
/**
 * The runner of each processor class whose instances are made per job (a request-scoped
 * consumer, `@Inject(JOB_REF)`: `@nestjs/bullmq` builds one for each job), by its class.
 */
const byClass = new WeakMap<object, JobRunner>();
/** Jobs that came before their processor was bound (BullMQ's worker may start first). */
const waiting = new Set<{ instance: object; resolve: (runner: JobRunner) => void }>();

function settle(matches: (instance: object) => boolean, runner: JobRunner): void {
  for (const waiter of [...waiting]) {
    if (!matches(waiter.instance)) continue;
    waiting.delete(waiter);
    waiter.resolve(runner);
  }
}

/** Binds `instance`'s `@IdempotentJob()` methods to `runner` (its app's module). */
export function bindJobs(instance: object, runner: JobRunner): void {
  byInstance.set(instance, runner);
  settle((waiter) => waiter === instance, runner);
}

/** Binds the `@IdempotentJob()` methods of every instance of `type` made per job. */
export function bindJobClass(type: object, runner: JobRunner): void {
  byClass.set(type, runner);
  settle((waiter) => waiter.constructor === type, runner);
}

/**
 * The runner bound to `instance` (or to its class); waits `waitMs` for it (a worker of
 * `@nestjs/bullmq` starts as its module initializes, maybe before the library's), then
 * `undefined`.
 */
export function runnerOf(instance: object, waitMs: number): Promise<JobRunner | undefined> {
  const bound = byInstance.get(instance) ?? byClass.get(instance.constructor);
  if (bound) return Promise.resolve(bound);
  return new Promise((resolve) => {
    const waiter = {
      instance,
      resolve: (runner: JobRunner) => {
        clearTimeout(timer);
        resolve(runner);
      },
    };
    const timer = setTimeout(() => {
      waiting.delete(waiter);
      resolve(undefined);
    }, waitMs);
    waiting.add(waiter);
  });
}
