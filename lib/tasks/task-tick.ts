import { AsyncLocalStorage } from 'node:async_hooks';

/** The tick a scheduled task's method runs for (see `currentTick`). */
export interface TaskTick {
  /** The task's name, its ticks' keys kept under `schedule:<name>`. */
  readonly task: string;
  /** The scheduled time this tick stands for (its key), the same on every replica. */
  readonly slot: Date;
  /** Whether this run resumes a tick left unfinished (a replica died mid-tick). */
  readonly resumed: boolean;
}

export const tickStorage = new AsyncLocalStorage<TaskTick>();

/**
 * Inside an `@IdempotentTask()` method, the tick it runs for: a resumed tick runs the method
 * again, later, for its own slot, which `slot` gives (the time to settle up to, say), where
 * `new Date()` would give the time it happens to run. `undefined` elsewhere.
 */
export function currentTick(): TaskTick | undefined {
  return tickStorage.getStore();
}
