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
  const view: QueryRunner = new Proxy(runner, {
    get(target, property) {
      if (property === 'manager') return (manager ??= managerOf(view));
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
