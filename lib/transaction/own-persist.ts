import { AsyncLocalStorage } from 'node:async_hooks';
import { type EntityManager } from 'typeorm';
import { TransactionControlRefusedError } from './seam-errors.js';

/**
 * Set while a save runs: an EntityManager's `save()`, `remove()`, `softRemove()` or
 * `recover()`, or a query builder's write with `useTransaction(true)`.
 */
const persisting = new AsyncLocalStorage<Persist>();

/** A save under way: whether it had to run without a transaction of its own. */
interface Persist {
  unprotected: boolean;
  /**
   * The save settled: work its listeners started and did not await, which keeps the async
   * context, is no longer part of it.
   */
  settled?: boolean;
}

/** What a request does with a save that failed without a transaction of its own. */
export interface PersistingRequest {
  unprotectedSaveFailed?(error: unknown): void;
}

/** The EntityManager methods that run TypeORM's EntityPersistExecutor. */
const PERSISTS = ['save', 'remove', 'softRemove', 'recover'] as const;

/**
 * The query builders whose `execute()` opens a transaction of its own on `useTransaction(true)`
 * (TypeORM exports not all of their classes: they are read from builders the manager makes).
 */
function writeBuildersOf(manager: EntityManager): object[] {
  const select = manager.createQueryBuilder();
  return [select.insert(), select.update(), select.delete(), select.softDelete()];
}

/** Managers handed to code as a transaction's (a phase's work): their saves open none. */
const transactionManagers = new WeakSet<EntityManager>();

type Method = (this: unknown, ...args: unknown[]) => unknown;

const wrapped = new WeakSet<Method>();

/**
 * Makes every save that TypeORM would make all or nothing with a transaction of its own run as
 * a save (see `isPersisting`), whatever manager or repository it comes through: the
 * DataSource's, `createEntityManager()`'s, a custom repository's, `IdempotentTransaction`'s, a
 * query builder's `useTransaction(true)`. TypeORM opens that transaction only when its runner
 * has none (`!queryRunner.isTransactionActive`), and rolls it back when anything in it throws
 * (an `@AfterInsert` listener, a subscriber). The request's runner is an open transaction to
 * everything else (a locking read must find one, as the handler runs in one), but to a save
 * outside any nested transaction of its code it says none, so that the save opens its own, a
 * savepoint, as it would without the library. Patched on the classes `manager` is made of, once.
 */
export function protectSaves(
  manager: EntityManager,
  /** The request the code running now is in (its transaction scope), if any. */
  requestOf: () => object | undefined,
): void {
  const managerClass = ownerOf(manager, 'save');
  if (managerClass) {
    wrap(
      managerClass,
      PERSISTS,
      (self) => !transactionManagers.has(self as EntityManager),
      requestOf,
    );
  }
  const selectClass = ownerOf(manager.createQueryBuilder(), LOCK_CHECK);
  if (selectClass) askedForLock(selectClass);
  for (const builder of writeBuildersOf(manager)) {
    const builderClass = ownerOf(builder, 'execute');
    if (!builderClass) continue;
    wrap(
      builderClass,
      ['execute'],
      (self) =>
        (self as { expressionMap?: { useTransaction?: boolean } }).expressionMap?.useTransaction ===
        true,
      requestOf,
    );
  }
}

/** The prototype in `object`'s chain that holds `method` itself. */
function ownerOf(object: object, method: string): Record<string, unknown> | undefined {
  for (let proto: object | null = object; proto; proto = Object.getPrototypeOf(proto) as object) {
    if (Object.prototype.hasOwnProperty.call(proto, method))
      return proto as Record<string, unknown>;
  }
  return undefined;
}

/**
 * Whether a save failed because the seam refused its statement (the refusal itself, or
 * TypeORM's `QueryFailedError` holding it as its `driverError`): that refusal, recorded as it
 * was refused, is what the request met, and its fate decides the answer; the save's failure is
 * not another refusal of its own (a `ConcurrentSaveFailedError` would, with a stronger fate,
 * replace it: adversary 102's strongest-fate rule).
 */
function refusedBySeam(error: unknown): boolean {
  const inner = (error as { driverError?: unknown } | null | undefined)?.driverError;
  return (
    error instanceof TransactionControlRefusedError ||
    inner instanceof TransactionControlRefusedError
  );
}

function wrap(
  target: Record<string, unknown>,
  methods: readonly string[],
  isSave: (self: unknown) => boolean,
  requestOf: () => object | undefined,
): void {
  for (const name of methods) {
    const own = target[name];
    if (typeof own !== 'function' || wrapped.has(own as Method)) continue;
    const save: Method = function (this: unknown, ...args: unknown[]) {
      if (isPersisting() || !isSave(this)) return (own as Method).apply(this, args);
      const state: Persist = { unprotected: false };
      const run = persisting.run(state, () => (own as Method).apply(this, args) as unknown);
      // A save that ran inside a transaction it cannot undo alone (another save's, or a
      // nested one of other code's) leaves the request only a rollback when it fails (a clear
      // 500), never its rows kept with an answer that says it failed. (Not queued: a save
      // whose listener awaits another save of the request would wait for ever.)
      return Promise.resolve(run).then(
        (value) => {
          state.settled = true;
          return value;
        },
        (error: unknown) => {
          state.settled = true;
          if (state.unprotected && !refusedBySeam(error)) {
            (requestOf() as PersistingRequest | undefined)?.unprotectedSaveFailed?.(error);
          }
          throw error;
        },
      );
    };
    wrapped.add(save);
    target[name] = save;
  }
}

/**
 * The select builder's method that checks, before its first await, that a pessimistic lock
 * (`setLock('pessimistic_write')`, `find({ lock })`) has a transaction to last in
 * (`!queryRunner.isTransactionActive` throws `PessimisticLockTransactionRequiredError`).
 */
const LOCK_CHECK = 'executeEntitiesAndRawResults';

/** How many of TypeORM's lock checks run now (synchronously: see `askedForLock`). */
let lockChecks = 0;

/**
 * Whether the code asking a runner's `isTransactionActive` now is TypeORM's own lock check: it
 * asks whether a lock can last, and the request's transaction is open (the handler runs in
 * one), where its code's own question is about its own transaction (see `LazyTransaction.viewOf`).
 */
export function askingForLock(): boolean {
  return lockChecks > 0;
}

/** Marks the synchronous start of the select builder's `LOCK_CHECK`, where it asks. */
function askedForLock(target: Record<string, unknown>): void {
  const own = target[LOCK_CHECK];
  if (typeof own !== 'function' || wrapped.has(own as Method)) return;
  const check: Method = function (this: unknown, ...args: unknown[]) {
    lockChecks++;
    try {
      return (own as Method).apply(this, args);
    } finally {
      lockChecks--;
    }
  };
  wrapped.add(check);
  target[LOCK_CHECK] = check;
}

/** `manager` is a transaction's (handed to a phase's work): its saves open no transaction. */
export function asTransactionManager(manager: EntityManager): EntityManager {
  transactionManagers.add(manager);
  return manager;
}

/** Whether the code running now is a save (or remove…, or a write with `useTransaction`). */
export function isPersisting(): boolean {
  const state = persisting.getStore();
  return state !== undefined && !state.settled;
}

/** Notes that the save running now had to run without a transaction of its own. */
export function markUnprotected(): void {
  const state = persisting.getStore();
  if (state && !state.settled) state.unprotected = true;
}
