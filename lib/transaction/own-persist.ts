import { AsyncLocalStorage } from 'node:async_hooks';
import { type EntityManager } from 'typeorm';

/** Set while an EntityManager's `save()`, `remove()`, `softRemove()` or `recover()` runs. */
const persisting = new AsyncLocalStorage<Persist>();

/** A save under way: whether it had to run without a transaction of its own. */
interface Persist {
  unprotected: boolean;
}

/** What a request does with a save that failed without a transaction of its own. */
export interface PersistingRequest {
  unprotectedSaveFailed?(error: unknown): void;
}

/** The EntityManager methods that run TypeORM's EntityPersistExecutor. */
const PERSISTS = ['save', 'remove', 'softRemove', 'recover'] as const;

const marked = new WeakSet<EntityManager>();

/**
 * Marks what `manager`'s persisting methods run as persisting (see `isPersisting`). TypeORM's
 * EntityPersistExecutor makes a save all or nothing with a transaction of its own, opened
 * only when its runner has none (`!queryRunner.isTransactionActive`), and rolled back when
 * anything in it throws (an `@AfterInsert` listener, a subscriber). The request's runner is
 * an open transaction to everything else (a locking read must find one, as the handler runs
 * in one), but to a save outside any nested transaction of its code it says none, so that the
 * save opens its own, a savepoint, as it would without the library.
 */
export function markPersisting(
  manager: EntityManager,
  /** The request the code running now is in (its transaction scope), if any. */
  requestOf: () => object | undefined,
): EntityManager {
  if (marked.has(manager)) return manager;
  marked.add(manager);
  const methods = manager as unknown as Record<string, (...args: unknown[]) => unknown>;
  for (const name of PERSISTS) {
    const own = methods[name];
    if (typeof own !== 'function') continue;
    methods[name] = function (this: unknown, ...args: unknown[]) {
      if (persisting.getStore()) return own.apply(this, args);
      const state: Persist = { unprotected: false };
      const run = persisting.run(state, () => own.apply(this, args)) as Promise<unknown>;
      // A save that ran while another save's transaction was open ran inside that one, which
      // cannot undo it alone: failed, it leaves the request only a rollback (a clear 500),
      // never its rows kept with an answer that says it failed. (Not queued: a save whose
      // listener awaits another save of the request would wait for ever.)
      return run.catch((error: unknown) => {
        if (state.unprotected)
          (requestOf() as PersistingRequest | undefined)?.unprotectedSaveFailed?.(error);
        throw error;
      });
    };
  }
  return manager;
}

/** Whether the code running now is a save (or remove…) of a marked manager. */
export function isPersisting(): boolean {
  return persisting.getStore() !== undefined;
}

/** Notes that the save running now had to run without a transaction of its own. */
export function markUnprotected(): void {
  const state = persisting.getStore();
  if (state) state.unprotected = true;
}
