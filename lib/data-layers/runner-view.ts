import { type EntityManager, type QueryRunner } from 'typeorm';

/**
 * A view of the request's one TypeORM runner, as one `createQueryRunner()` in the request's
 * scope hands it out: everything is the runner's (its state is read from it and written to
 * it), but the view is the object TypeORM calls the runner's methods on, so the runner knows
 * which view a statement came through (see `NestedIdentity`), and its `manager` is its own
 * (TypeORM writes a save through `runner.manager`, and a transaction's code gets it).
 * The manager is made only if asked for. Its `data` is its own too (initialised `{}`, as
 * TypeORM's runner does): a save writes its `save(…, { data })` there for its subscribers
 * (`event.queryRunner.data`), and two saves at once must not read each other's. While its
 * transaction runs on a runner of its own, its `data` is that runner's (carried over and back):
 * the subscribers of a save in it are handed that runner.
 * `transactionActive`, if given, is what the view says of `isTransactionActive` (see
 * `protectSaves`).
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
  /**
   * Whether a transaction its code started through `view` is open (started, its commit not
   * asked yet): what its `[Symbol.asyncDispose]` commits (see `disposeOf`).
   */
  ownOpen?: (view: QueryRunner) => boolean,
  /**
   * The runner the view stands for when used now, or undefined for its own: a view of the
   * transaction of the scope it is used in, when that is not its request's (a repository kept
   * from one request and used in another: `LazyTransaction.viewOf`). Asked at each use.
   */
  elsewhere?: () => QueryRunner | undefined,
): QueryRunner {
  let manager: EntityManager | undefined;
  let data: QueryRunner['data'] = {};
  let broadcaster: unknown;
  /** The runner of its own its transaction runs on, until that transaction ends. */
  let own: QueryRunner | undefined;
  /** Its transaction on its own runner ended: the connection goes back, and the view is as before. */
  const ended = async (runnerOfIts: QueryRunner) => {
    if (own !== runnerOfIts || runnerOfIts.isTransactionActive) return;
    leave(runnerOfIts);
    await runnerOfIts.release();
  };
  /** Back from its own runner: its `data` is the view's again, as that runner last had it. */
  const leave = (runnerOfIts: QueryRunner) => {
    data = runnerOfIts.data;
    own = undefined;
  };
  const view: QueryRunner = new Proxy(runner, {
    get(target, property) {
      // Used in another transaction's scope: everything is that one's view's, its methods
      // called on it (its statements, its nested transactions, its manager, its `data`).
      // Asked first, even while its transaction runs on a runner of its own (work its home
      // left running past its end): a later request's statement joins that request, never the
      // left-running transaction (adversary 90: it committed with that work after its own
      // request failed, and its retry wrote it again).
      const joined = elsewhere?.();
      if (joined) return boundOf(joined, property);
      if (property === 'manager') return (manager ??= managerOf(view));
      if (property === 'data') return own ? own.data : data;
      // Its `data` goes with it (a save wrote its `{ data }` on the view before it started
      // its transaction): its subscribers now read that runner's (adversary 77).
      if (!own && property === 'startTransaction') {
        own = apart?.();
        if (own) own.data = data;
      }
      // Its transaction on a runner of its own: everything is that runner's, its methods
      // called on it (TypeORM keeps its connected runners in a list, by the object `connect()`
      // and `release()` are called on: one of each would never leave it). The view's manager,
      // made for the view, still reaches it. Its end gives the connection back.
      if (own) {
        const runnerOfIts = own;
        const value = Reflect.get(runnerOfIts, property) as unknown;
        if (typeof value !== 'function') return value;
        const method = (value as (...args: unknown[]) => unknown).bind(runnerOfIts);
        // TypeORM's dispose commits and releases that runner: the view is as before after it.
        // So is what the view itself holds (a connection its `connect()` handed out past the
        // request's end: `LazyTransaction.clientAfterEnd`).
        if (property === 'release' || property === ASYNC_DISPOSE) {
          return async () => {
            if (own === runnerOfIts) leave(runnerOfIts);
            try {
              return await method();
            } finally {
              await (Reflect.get(target, 'release') as () => Promise<void>).call(view);
            }
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
      if (
        property === ASYNC_DISPOSE &&
        ownOpen &&
        typeof Reflect.get(target, property) === 'function'
      ) {
        return () => disposeOf(view, () => ownOpen(view), depthOf(target));
      }
      return Reflect.get(target, property) as unknown;
    },
    set(target, property, value) {
      const joined = elsewhere?.();
      if (joined) return Reflect.set(joined, property, value);
      if (property === 'data') {
        if (own) own.data = value;
        else data = value;
        return true;
      }
      if (property !== 'manager') return Reflect.set(own ?? target, property, value);
      manager = value as EntityManager;
      return true;
    },
  });
  return view;
}

/** `runner`'s `property`, a method bound to it (called on it, as TypeORM's own calls are). */
function boundOf(runner: QueryRunner, property: string | symbol): unknown {
  const value = Reflect.get(runner, property) as unknown;
  if (typeof value !== 'function' || property === 'constructor') return value;
  return (value as (...args: unknown[]) => unknown).bind(runner);
}

/** `Symbol.asyncDispose`, where the runtime has it (TypeORM 1.x's runners are `AsyncDisposable`). */
const ASYNC_DISPOSE = (Symbol as unknown as { asyncDispose?: symbol }).asyncDispose;

/**
 * What a view does at the end of `await using qr = dataSource.createQueryRunner()`, as
 * TypeORM 1.x's runner does for its code's own transaction: commits it if open, then releases
 * (in a `finally`). TypeORM's own sets `transactionDepth = 1` to "ignore all savepoints and
 * commit directly", which on the view would write through to the request's one runner, whose
 * depth 1 is the request's own transaction, and the commit that follows would be refused as
 * one of it (adversary 81). The code's transaction is a savepoint of the request's (the view's
 * savepoints, by its nested `startTransaction()`s): each of them is committed, innermost first
 * (each a RELEASE, its subscribers told as for any of its commits), until none of its own is
 * open; the request's transaction and other views' are left alone. At most `depth` commits.
 */
async function disposeOf(view: QueryRunner, ownOpen: () => boolean, depth: number): Promise<void> {
  try {
    for (let left = Math.max(depth, 1); left > 0 && ownOpen(); left--) {
      await view.commitTransaction();
    }
  } finally {
    await view.release();
  }
}

/** The runner's transaction depth (TypeORM's, not in its types). */
function depthOf(runner: QueryRunner): number {
  return (runner as unknown as { transactionDepth?: number }).transactionDepth ?? 1;
}

/** A broadcaster of TypeORM's own class (not exported) for `view`, as each runner has one. */
function broadcasterOf(runner: QueryRunner, view: QueryRunner): unknown {
  const own = (
    runner as unknown as { broadcaster?: { constructor: new (r: QueryRunner) => object } }
  ).broadcaster;
  return own ? new own.constructor(view) : undefined;
}

/**
 * What a view's `isTransactionActive` says outside a save (adversary 80b): to its code, as
 * TypeORM's runner would, whether a transaction of its own is open (`ownOpen`: started and not
 * yet committed or rolled back), so that `if (runner.isTransactionActive) await
 * runner.rollbackTransaction()` and "start one only if none" do as without the library; open
 * always to a phase's manager (`phaseManager`: handed as a transaction's) and to TypeORM's own
 * lock check (`lockCheck`: a pessimistic lock lasts in the request's transaction).
 */
export function viewSaysActive(
  phaseManager: boolean,
  lockCheck: boolean,
  ownOpen: boolean,
): boolean {
  return phaseManager || lockCheck || ownOpen;
}
