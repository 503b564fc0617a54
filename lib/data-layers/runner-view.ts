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
): QueryRunner {
  let manager: EntityManager | undefined;
  let broadcaster: unknown;
  const view: QueryRunner = new Proxy(runner, {
    get(target, property) {
      if (property === 'manager') return (manager ??= managerOf(view));
      // Its own: an entity's subscribers and listeners get `event.manager` from the
      // broadcaster's runner, which must be this view, as TypeORM hands a subscriber the
      // runner the save ran on.
      if (property === 'broadcaster') return (broadcaster ??= broadcasterOf(target, view));
      if (property === 'isTransactionActive' && transactionActive) return transactionActive(view);
      return Reflect.get(target, property) as unknown;
    },
    set(target, property, value) {
      if (property !== 'manager') return Reflect.set(target, property, value);
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
