/** The errors a BullMQ processor throws to steer its job (BullMQ's own classes). */
export interface BullmqErrors {
  /** Fails the job at once, its attempts left unused; its message is the job's reason. */
  UnrecoverableError: new (message?: string) => Error;
  /** Says the processor moved the job to the delayed set (`job.moveToDelayed`). */
  DelayedError: new (message?: string) => Error;
}

let loading: Promise<BullmqErrors> | undefined;

/**
 * BullMQ's error classes, loaded from the app's `bullmq` when a job first runs: the library
 * does not depend on it (an app without BullMQ never loads it). Its worker tells them by
 * class, so they must be the app's own copy's.
 */
export function bullmqErrors(): Promise<BullmqErrors> {
  loading ??= import('bullmq').then((bullmq) => ({
    UnrecoverableError: bullmq.UnrecoverableError,
    DelayedError: bullmq.DelayedError,
  }));
  return loading;
}
