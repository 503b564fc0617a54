import { AsyncLocalStorage } from 'node:async_hooks';
import { type EntityManager } from 'typeorm';

/** Set while an EntityManager's `save()`, `remove()`, `softRemove()` or `recover()` runs. */
const persisting = new AsyncLocalStorage<true>();

/** The EntityManager methods that run TypeORM's EntityPersistExecutor. */
const PERSISTS = ['save', 'remove', 'softRemove', 'recover'] as const;

const marked = new WeakSet<EntityManager>();

/** Each request's saves, one after the other (see `markPersisting`). */
const queues = new WeakMap<object, Promise<void>>();

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
      const save = () => persisting.run(true, () => own.apply(this, args));
      // One after the other in a request: two at once on its one connection would share the
      // first's savepoint (the second, asking while it is open, opens none), and a failure of
      // the second would be kept with the first. A save inside a save runs at once.
      const request = requestOf();
      if (!request || isPersisting()) return save();
      const run = (queues.get(request) ?? Promise.resolve()).then(save);
      queues.set(
        request,
        run.then(
          () => undefined,
          () => undefined,
        ),
      );
      return run;
    };
  }
  return manager;
}

/** Whether the code running now is a save (or remove…) of a marked manager. */
export function isPersisting(): boolean {
  return persisting.getStore() === true;
}
