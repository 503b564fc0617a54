import { type EntityManager, type QueryRunner } from 'typeorm';

/**
 * A view of the request's one TypeORM runner, as one `createQueryRunner()` in the request's
 * scope hands it out: everything is the runner's (its state is read from it and written to
 * it), but the view is the object TypeORM calls the runner's methods on, so the runner knows
 * which view a statement came through (see `NestedIdentity`), and its `manager` is its own
 * (TypeORM writes a save through `runner.manager`, and a transaction's code gets it).
 * The manager is made only if asked for. `transactionActive`, if given, is what the view says
 * of `isTransactionActive` (see `protectSaves`).
 */
export function runnerView(
  runner: QueryRunner,
  managerOf: (view: QueryRunner) => EntityManager,
  transactionActive?: (view: QueryRunner) => boolean,
  /**
   * A runner of its own for a transaction the view starts, or undefined (see
   * `LazyTransaction.viewOf`: one started past the request's end). Asked at each
   * `startTransaction()` while the view has none.
   */
  apart?: () => QueryRunner | undefined,
): QueryRunner {
  let manager: EntityManager | undefined;
  let broadcaster: unknown;
  /** The runner of its own its transaction runs on, until that transaction ends. */
  let own: QueryRunner | undefined;
  /** Its transaction on its own runner ended: the connection goes back, and the view is as before. */
  const ended = async (runnerOfIts: QueryRunner) => {
    if (own !== runnerOfIts || runnerOfIts.isTransactionActive) return;
    own = undefined;
    await runnerOfIts.release();
  };
  const view: QueryRunner = new Proxy(runner, {
    get(target, property) {
      if (property === 'manager') return (manager ??= managerOf(view));
      if (!own && property === 'startTransaction') own = apart?.();
      // Its transaction on a runner of its own: everything is that runner's, its methods
      // called on it (TypeORM keeps its connected runners in a list, by the object `connect()`
      // and `release()` are called on: one of each would never leave it). The view's manager,
      // made for the view, still reaches it. Its end gives the connection back.
      if (own) {
        const runnerOfIts = own;
        const value = Reflect.get(runnerOfIts, property) as unknown;
        if (typeof value !== 'function') return value;
        const method = (value as (...args: unknown[]) => unknown).bind(runnerOfIts);
        if (property === 'release') {
          return () => {
            own = undefined;
            return method();
          };
        }
        if (property !== 'commitTransaction' && property !== 'rollbackTransaction') return method;
        return async (...args: unknown[]) => {
          try {
            return await method(...args);
          } finally {
            await ended(runnerOfIts);
          }
        };
      }
      // Its own: an entity's subscribers and listeners get `event.manager` from the
      // broadcaster's runner, which must be this view, as TypeORM hands a subscriber the
      // runner the save ran on.
      if (property === 'broadcaster') return (broadcaster ??= broadcasterOf(target, view));
      if (property === 'isTransactionActive' && transactionActive) return transactionActive(view);
      return Reflect.get(target, property) as unknown;
    },
    set(target, property, value) {
      if (property !== 'manager') return Reflect.set(own ?? target, property, value);
      manager = value as EntityManager;
      return true;
    },
  });
  return view;
}

/** A broadcaster of TypeORM's own class (not exported) for `view`, as each runner has one. */
function broadcasterOf(runner: QueryRunner, view: QueryRunner): unknown {
  const own = (
    runner as unknown as { broadcaster?: { constructor: new (r: QueryRunner) => object } }
  ).broadcaster;
  return own ? new own.constructor(view) : undefined;
}
