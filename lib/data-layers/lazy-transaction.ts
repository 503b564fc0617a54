import { readingOnly } from '../connection/read-only-query.js';
import pg, { type Pool, type PoolClient } from 'pg';
import {
  type DataSource,
  type EntityManager,
  type QueryRunner,
  type ReplicationMode,
} from 'typeorm';
import {
  isReadOnlyError,
  isTransactionAbortedError,
  markDatabaseFailure,
} from '../connection/connection-errors.js';
import { acquire } from '../connection/deadline.js';
import { isAboveReadCommitted } from '../transaction/isolation-level.js';
import { asksIsolation } from './nested-isolation.js';
import { NestedIdentity } from './nested-identity.js';
import { deferredAgain, deferredCheck, NestedCommit } from './nested-commit.js';
import { CommitHold } from './commit-hold.js';
import { SubscriberWatch, WATCHED_EVENTS } from './subscriber-watch.js';
import { callingOneByOne } from './subscriber-calls.js';
import { OpenStreams } from './open-streams.js';
import { SendOrder } from './send-order.js';
import { TurnQueue } from './turn-queue.js';
import { OwnedAsyncStorage } from './owned-async-storage.js';
import {
  askingForLock,
  asTransactionManager,
  isPersisting,
  markUnprotected,
} from '../transaction/own-persist.js';
import { runnerView, viewSaysActive } from './runner-view.js';
import {
  AfterRequestCommit,
  controlsRan,
  type TextOutcome,
  whenTold,
} from './after-request-commit.js';
import { typeormSavepointAsWithout } from './typeorm-savepoint-names.js';
import {
  REQUEST_CODE,
  RunnerSavepoints,
  SavepointAcrossRunnersError,
} from './runner-savepoints.js';
import { type FencedStatement } from '../transaction/request-transaction.js';
import {
  ConcurrentSaveFailedError,
  CursorOpenRefusedError,
  IsolationLevelRefusedError,
  NestedTransactionOpenAtCommitError,
  NestedTurnTimeoutError,
  ReadOnlyTransactionRefusedError,
  type RunnerConnectedOutsideRequestError,
  StatementBesideNestedTransactionError,
  SubscriberTransactionOpenError,
  TransactionEndedError,
} from '../transaction/seam-errors.js';
import {
  isPlainRead,
  isTransactionModeOnly,
  nestedControlOf,
  savepointControlsOf,
  type SavepointControl,
  setsIdentity,
  setsReadOnly,
} from '../transaction/sql/sql-text.js';
import {
  keepNestedState,
  type KeptNestedState,
  READ_SETTINGS,
  restoreNestedState,
} from '../connection/session-state.js';
import { ownQueryRunner, transactionScope } from '../transaction/transaction-scope.js';
import { type RunnerScope } from '../transaction/runner-place.js';
import { placeOfView, type ScopeOfUse } from './view-place.js';
import {
  asError,
  isSubmittable,
  RequestTransaction,
  textOf,
  valuesOf,
} from '../transaction/request-transaction.js';
import { refusedStatement } from '../transaction/refused-statement.js';
import { answered } from '../transaction/answered.js';
import { endOf } from '../transaction/submitted-end.js';

/** The name a nested transaction begun beside others notes its start under, by its depth. */
function besideName(depth: number): string {
  return `beside_${depth}`;
}

/** The name the outermost nested transaction's session state is kept under (one: depth 1). */
const OUTERMOST_KEPT_AS = 'typeorm_1';

export { TransactionAbortedError, TransactionEndedError } from '../transaction/seam-errors.js';
export { type FencedStatement } from '../transaction/request-transaction.js';

/**
 * The request's transaction as TypeORM's code meets it: one query runner of the DataSource's
 * that every runner asked for in the request's scope is a view of (see `joinTransactionsOf`,
 * `runnerView`), set up to look like an open transaction from the start, so that what code in
 * the scope does with it nests as savepoints. The connection, the `BEGIN`, the commit with the
 * stored response and the refusals are `RequestTransaction`'s.
 */
export class LazyTransaction extends RequestTransaction {
  private runner?: QueryRunner;
  /**
   * The depth at which the runner's last `startTransaction()` failed before its savepoint
   * existed: TypeORM's `transaction()` then calls `rollbackTransaction()`, which has nothing
   * of its own to roll back, and must not reach the request's transaction.
   */
  private failedStartAt?: number;
  /** The depth of the nested transaction its code made read only, while it is open. */
  private readOnlyFrom?: number;
  /**
   * The view whose nested commit failed after its RELEASE (what its COMMIT would end could not
   * be put back; its `afterTransactionCommit` subscribers are told only after the request's
   * COMMIT: `AfterRequestCommit`), until its next commit: TypeORM's rollback that follows is its own.
   */
  private releasedFor?: unknown;
  /** Whether the open outermost nested transaction kept the session's state (not a save's). */
  private outermostKept = false;
  /**
   * Whether a save's own outermost transaction kept it after all, before a statement in it set
   * the role, session authorization or search path (a subscriber's `afterTransactionStart`
   * running `SET LOCAL search_path`): put back at its commit as for the code's own.
   */
  private saveKept = false;
  /** What the open outermost nested transaction's code left that its COMMIT would end. */
  private nestedCommit = new NestedCommit();
  /** Its code's nested transactions, by the view that started each (see `besideIdentity`). */
  private readonly nested = new NestedIdentity();
  /**
   * The depths of the open nested transactions begun beside others (see `besideAll`): each
   * noted when it began, so that its COMMIT closes the cursors opened in it, as its own COMMIT
   * would, and not the others' (see `NestedCommit.endingText`).
   */
  private readonly besideDepths = new Set<number>();
  /**
   * For each open nested transaction begun beside others, by its depth: what its code left
   * that its own COMMIT would end (its settings), put back at its commit with the role, session
   * authorization and search path it began with (kept under `besideName`), as for the
   * outermost (`nestedCommit`). Its session settings too (`SET app.actor = …`): on the
   * connection of its own it has without the library, the other's code would never see them.
   */
  private readonly besideCommits = new Map<number, NestedCommit>();
  /**
   * The role, session authorization, search path and start kept for each open nested
   * transaction that keeps them (`keepState`), by the name they are kept under: read back into
   * the process, so that its code's `RESET ALL` (which resets the settings they are kept in
   * too) cannot make its COMMIT put back an empty role.
   */
  private readonly keptStates = new Map<string, KeptNestedState>();
  /** Notes what a statement of a view's leaves for its nested transaction's COMMIT (`ensureRunner`). */
  private keepSettingsOf?: (from: unknown, args: unknown[]) => Promise<void>;
  /** Keeps a save's state before a statement in it sets its role or search path (`ensureRunner`). */
  private keepSaveStateOf?: (text: unknown) => Promise<void>;
  /** Its code's streams open on the connection (see `OpenStreams`). */
  private readonly streams = new OpenStreams();
  /**
   * The nested transactions being started, committed and rolled back, one after the other
   * (see `inTurn`), and how many starts: a save asks whether one is open before it starts its
   * own (see `viewOf`).
   */
  private startsUnderWay = 0;
  /** Each view's statements, sent in the order called (see `SendOrder`). */
  private readonly sendOrder = new SendOrder();
  /**
   * The nested starts, commits and rollbacks, one at a time (see `inTurn`), none waiting longer
   * than the module's deadline behind a turn that runs its code's subscribers.
   */
  private readonly turns = new TurnQueue(this.timeoutMs, () =>
    this.refuse(new NestedTurnTimeoutError(this.timeoutMs)),
  );
  /**
   * The commit or rollback whose `beforeTransactionCommit` / `beforeTransactionRollback`
   * subscribers run now (see `CommitHold`).
   */
  private commitHold?: CommitHold;
  /**
   * The holds of commits (rollbacks) that failed before their RELEASE (ROLLBACK TO), a
   * `beforeTransactionCommit` subscriber having thrown, by the depth of the transaction still
   * open: the starts its subscribers asked without awaiting them wait for that transaction's
   * end that follows (TypeORM's rollback of it), not for a RELEASE that never comes; run at
   * once, they would nest inside the transaction being refused, and its rollback, no longer
   * the innermost, would be refused (adversary 77). Released in `nestedEnded`, or at the
   * request's end (`refuseLeftOpen`).
   */
  private readonly heldPastFailedEnd: { hold: CommitHold; depth: number }[] = [];
  /** The transaction event whose subscribers the caller runs in (see `SubscriberWatch`). */
  private readonly watches = new OwnedAsyncStorage<SubscriberWatch>();
  /** The view whose nested transaction's start holds the turn now (see `endsOnArrival`). */
  private startingFor?: unknown;
  /** Its nested commits' `afterTransactionCommit`, told after the request's COMMIT. */
  private readonly afterCommit = new AfterRequestCommit();
  /** The savepoints its code set by hand, by query runner (`RunnerSavepoints`). */
  private readonly ownSavepoints = new RunnerSavepoints();
  /**
   * The connections its views' `connect()` handed out past the end (`clientAfterEnd`), by
   * view: each given back at that view's `release()`, as TypeORM's runner gives its own back.
   */
  private readonly clientsAfterEnd = new WeakMap<object, PoolClient>();

  constructor(
    private readonly dataSource: DataSource,
    pool: () => Pool,
    timeoutMs: number,
    joinable: boolean,
    namedStatements = true,
  ) {
    super(pool, timeoutMs, joinable, namedStatements);
  }

  /**
   * An EntityManager of its own view of the runner (a fresh one each time, as the DataSource's
   * manager asks for a runner of its own for each call); nothing is sent until the first
   * statement.
   */
  get manager(): EntityManager {
    return this.viewOf(this.ensureRunner(), true).manager;
  }

  /** A manager for services (`IdempotentTransaction`): its saves open their own savepoint. */
  override get sharedManager(): EntityManager {
    const runner = this.ensureRunner();
    const manager = this.viewOf(runner).manager;
    // Its `transaction()` runs on a view of its own, as the DataSource's manager's runs on a
    // runner of its own: a service that holds this manager and writes through it inside that
    // transaction's callback (not through the callback's manager) writes beside it, as it
    // would without the library, and is judged so.
    const transaction = (...args: unknown[]) =>
      (this.viewOf(runner).manager.transaction as (...a: unknown[]) => Promise<unknown>)(...args);
    return Object.assign(Object.create(manager) as EntityManager, {
      transaction,
    });
  }

  /**
   * Commits, then tells its nested commits' `afterTransactionCommit` subscribers (see
   * `AfterRequestCommit`): only now is what they were told of durable.
   */
  override async commitWith(statement: FencedStatement): Promise<boolean> {
    const committed = await super.commitWith(statement);
    if (committed) await this.tellCommitted();
    return committed;
  }

  override async commitPlain(): Promise<void> {
    await super.commitPlain();
    await this.tellCommitted();
  }

  /** Its code's work committed (not undone before the library's own statement committed). */
  private tellCommitted(): Promise<void> {
    if (!this.committed || this.effectsUndone) return Promise.resolve();
    return this.afterCommit.tell(this.dataSource, this.timeoutMs);
  }

  /**
   * A stream its code left open holds the connection the commit needs: the request can then
   * only roll back, and answers `cursor_open` (as on the pool seam).
   */
  protected override refuseLeftOpen(): void {
    if (this.ended) return;
    if (this.streams.any) this.refuse(new CursorOpenRefusedError());
    const depth = (this.runner as unknown as RunnerInternals | undefined)?.transactionDepth ?? 1;
    if (depth > 1 || this.startsUnderWay > 0) this.refuse(new NestedTransactionOpenAtCommitError());
    // A start still held past a failed commit never runs in the request now: let it fail
    // (the transaction ended) rather than wait forever.
    for (const { hold } of this.heldPastFailedEnd.splice(0)) hold.releasedNow();
  }

  /**
   * Runs `work` (a nested transaction's start, commit or rollback) once those asked before it
   * are done. TypeORM names a savepoint by the depth it starts at: two started at once would
   * both read the same depth (and take the same name), and a commit sent while another's start
   * is under way (`Promise.all` of two `dataSource.transaction()`, the first with nothing to
   * do) would release the savepoint that start had read the depth beside, leaving the second
   * to release one already gone (3B001). In turn, the commit meets the other's savepoint open
   * after its own, and is put off (`NestedIdentity.commitLater`). Asked by what runs inside
   * the turn under way (a `beforeTransactionCommit` subscriber's save opens a transaction of
   * its own), it runs at once, as part of that turn (which then lasts until it is done, and no
   * longer: see `TurnQueue`): waiting, it would wait for itself.
   */
  private inTurn<T>(work: () => Promise<T>): Promise<T> {
    return this.turns.run(work);
  }

  /**
   * Whether an end of `from`'s nested transaction, asked now, is decided on arrival rather than
   * in turn (a commit put off, a rollback refused): another's transaction begun after it is
   * open, or another's start is under way and the end is asked from outside that start's
   * turn. Either sends nothing, and the turn under way may run a subscriber awaiting that
   * very end: queued behind it, the end would wait for itself (a hang that holds the key).
   */
  private endsOnArrival(from: unknown): boolean {
    if (this.nested.ending(from as object, 'commit') === 'not-innermost') return true;
    return (
      this.startingFor !== undefined &&
      this.startingFor !== from &&
      this.nested.depthOf(from as object) !== undefined &&
      !this.turns.within
    );
  }

  /**
   * `work` (a nested start, commit or rollback asked through view `by`) in turn (`inTurn`),
   * and in the view's send order (`SendOrder`): its SAVEPOINT, RELEASE or ROLLBACK TO goes
   * through the runner, not the view, yet must not overtake a statement the view's code called
   * before it that still waits for its preparation (a setting's read): `Promise.all` of a
   * `set_config(…, true)` and a `manager.transaction()` would make the setting inside the
   * savepoint, and the savepoint's rollback would undo it. It waits until that one is sent,
   * not answered, as node-postgres queues a client's statements.
   */
  private inOrder<T>(by: unknown, work: () => Promise<T>, first?: Promise<void>): Promise<T> {
    if (by === this.runner || typeof by !== 'object' || by === null) {
      return first ? first.then(() => this.inTurn(work)) : this.inTurn(work);
    }
    return this.sendOrder
      .after(
        by,
        () => first ?? Promise.resolve(),
        () => this.inTurn(work),
      )
      .then(({ sent }) => sent);
  }

  /** Keeps the session's state under `name` (`keepNestedState`), its values in the process too. */
  private async keepState(name: string): Promise<void> {
    const internals = this.runner as unknown as RunnerInternals;
    const rows = (await internals.query(keepNestedState(name))) as KeptNestedState[];
    if (rows[0]) this.keptStates.set(name, rows[0]);
  }

  /** What puts back the state kept under `name`, from the process where it was read. */
  private restoreState(name: string): string {
    return restoreNestedState(name, this.keptStates.get(name));
  }

  /** A nested transaction ended (committed or rolled back), the runner now at `depth`. */
  private nestedEnded(depth: number, released = false): void {
    this.nested.endedAt(depth, released);
    for (const open of this.besideDepths) {
      if (open > depth) this.besideDepths.delete(open);
    }
    for (const open of this.besideCommits.keys()) {
      if (open > depth) this.besideCommits.delete(open);
    }
    if (this.readOnlyFrom !== undefined && depth < this.readOnlyFrom) this.readOnlyFrom = undefined;
    // The transaction whose commit failed before its RELEASE ended: its held starts run now.
    for (let at = this.heldPastFailedEnd.length - 1; at >= 0; at--) {
      const held = this.heldPastFailedEnd[at]!;
      if (held.depth <= depth) continue;
      this.heldPastFailedEnd.splice(at, 1);
      held.hold.releasedNow();
    }
  }

  /** A save that ran inside another's transaction failed: the request can only roll back. */
  unprotectedSaveFailed(): void {
    this.refuse(new ConcurrentSaveFailedError());
  }

  override get readOnlyNow(): boolean {
    return this.readOnlyFrom !== undefined;
  }

  async query<R = Record<string, unknown>>(text: string, values: unknown[]): Promise<R[]> {
    // Once its code ran in it, beside the code's session state (see `ownStatement`).
    const own = await this.ownStatement(text, values);
    if (own) return own.rows as R[];
    // The structured result: its rows whatever the command (TypeORM hands an UPDATE's back
    // as [rows, count] otherwise).
    const result = await this.ensureRunner().query(text, values, true);
    return result.records as R[];
  }

  override joinedRunner(dataSource: DataSource, _mode: ReplicationMode): QueryRunner | undefined {
    if (!this.joinable || dataSource !== this.dataSource) return undefined;
    if (this.ended) {
      // After the answer committed, work the handler left running (an event listener it did
      // not await) runs on its own, as it would without the library: a replay never runs it
      // again. After a rollback it must not commit apart: the retry runs the handler again.
      // While the commit is under way, its outcome is not known yet: the runner waits for it.
      if (!this.settled) return this.runnerAfterEnd();
      if (this.committed) return undefined;
      throw new TransactionEndedError();
    }
    return this.viewOf(this.ensureRunner());
  }

  /**
   * A view of its runner for a runner made elsewhere and used in its scope (a repository kept
   * from another request, a runner made outside any scope: `runnerView`'s `elsewhere`,
   * `joiningWhereUsed`), while it is open; undefined otherwise.
   */
  openRunner(dataSource: DataSource): QueryRunner | undefined {
    if (!this.joinable || dataSource !== this.dataSource || this.ended) return undefined;
    return this.viewOf(this.ensureRunner());
  }

  /**
   * For a runner made elsewhere first used in its scope after its end (`placeOfRunner`'s
   * `after-end`): a runner of the DataSource's own that waits for the end's outcome.
   */
  runnerPastEnd(dataSource: DataSource): QueryRunner | undefined {
    if (!this.joinable || dataSource !== this.dataSource || !this.ended) return undefined;
    return this.runnerAfterEnd();
  }

  /** A statement of a runner connected outside it was refused (`placeOfRunner`'s `refuse`). */
  refuseRunner(error: RunnerConnectedOutsideRequestError): void {
    if (!this.ended) this.refuse(error);
  }

  /** How it stands to a runner of `dataSource` made elsewhere (`placeOfRunner`). */
  runnerScope(dataSource: DataSource): Exclude<RunnerScope, 'none'> {
    if (dataSource !== this.dataSource) return 'apart';
    if (this.joinable) return this.ended ? 'ended' : 'open';
    return this.joinsAtHandler && !this.ended ? 'later' : 'apart';
  }

  /**
   * How a statement of one of its views, sent now, runs when it is not the request's own
   * (`placeOfView`): `work` as it is (on its own, now), or once the other request it was sent
   * from ended; undefined for the request's own (as always). A scope whose transaction it
   * joins never asks: the view hands everything to that one's (`viewOf`).
   */
  private elsewhereNow(): (<T>(work: () => Promise<T>) => Promise<T>) | undefined {
    const store = transactionScope.getStore();
    const scope: ScopeOfUse =
      store === this
        ? 'home'
        : store === undefined
          ? 'none'
          : store instanceof LazyTransaction && store.ended
            ? 'ended-request'
            : 'apart';
    const place = placeOfView(scope);
    if (place === 'apart') return (work) => work();
    if (place === 'after-its-end') return (work) => (store as LazyTransaction).apart(false, work);
    return undefined;
  }

  /**
   * What one `createQueryRunner()` gets: a view of the one runner, so that the runner tells a
   * nested transaction's statements (through the view that started it) from those beside it.
   * The library's own statements go through the runner itself. To a save (`protectSaves`)
   * outside any nested transaction, the view says no transaction is open, so that the save
   * opens its own (a savepoint) and rolls it back if anything in it throws, as without the
   * library. A save inside one opens none, as in a transaction of its own; when that one is not
   * its own view's (another save's, one being started, or a nested transaction of other code
   * that it runs beside or within through another manager, which without the library would
   * have given it a connection and transaction of its own), it cannot undo itself alone, and
   * its failure leaves the request only a rollback (`ConcurrentSaveFailedError`). The view's
   * manager is a transaction's when `transactionManager` (the one a phase's work is handed):
   * its saves open none.
   */
  private viewOf(runner: QueryRunner, transactionManager = false): QueryRunner {
    const internals = runner as unknown as RunnerInternals;
    // A transaction it starts past the request's end with no nested transaction open (a
    // `save()` in an event listener whose load straddled the commit): on a runner of its own,
    // which waits for the end's outcome, as one made after it would, and gives its connection
    // back when that transaction ends. Its statements outside a transaction run apart, each
    // on a connection it gives back (`queryFrom`).
    const apart = () => {
      // Used from another scope that it does not join (`outside()`, no request's): on a
      // runner of its own, as without the library (`elsewhereNow`).
      const away = this.elsewhereNow();
      if (away) return this.runnerApart(away);
      return this.ended && internals.transactionDepth <= 1 ? this.runnerAfterEnd() : undefined;
    };
    // Kept (a repository a service looked up once) and used in another open transaction's
    // scope: that one's view, one per scope, from its first use there (`openRunner`).
    const joined = new WeakMap<object, QueryRunner>();
    const elsewhere = (): QueryRunner | undefined => {
      const store = transactionScope.getStore();
      if (store === undefined || store === this) return undefined;
      const known = joined.get(store);
      if (known) return known;
      const view = store.openRunner?.(this.dataSource);
      if (view) joined.set(store, view);
      return view;
    };
    return runnerView(
      runner,
      (view) => {
        const manager = this.dataSource.createEntityManager(view);
        return transactionManager ? asTransactionManager(manager) : manager;
      },
      (view) => {
        // Its code's question (`if (runner.isTransactionActive) await runner.rollbackTransaction()`,
        // "start one only if none is open"): answered as TypeORM's runner would for the code's
        // own transaction, open only from its `startTransaction()` to its commit (put off or
        // not) or rollback; the request's transaction is the library's (adversary 80b). A
        // phase's manager is a transaction's, and TypeORM's lock check asks whether a lock can
        // last: open (`viewSaysActive`).
        if (!isPersisting()) {
          return viewSaysActive(
            transactionManager,
            askingForLock(),
            this.nested.hasUncommitted(view as object),
          );
        }
        const open = internals.transactionDepth > 1 || this.startsUnderWay > 0;
        // Another save's own transaction open (or one starting), or other code's.
        const besideSave = internals.transactionDepth > 1 && !this.outermostKept;
        if (open && (besideSave || this.startsUnderWay > 0 || !this.nested.ownsInnermost(view))) {
          markUnprotected();
        }
        return open;
      },
      apart,
      // What `await using` commits at the end of its scope: its code's own transaction.
      (view) => this.nested.hasUncommitted(view as object),
      elsewhere,
    );
  }

  /**
   * Runs TypeORM's own start, commit or rollback of a nested transaction with the runner's
   * broadcaster the view's that asked for it: its subscribers' transaction events
   * (`afterTransactionStart`, `beforeTransactionCommit`…) get that view as `event.queryRunner`
   * and its manager as `event.manager`, as TypeORM hands them the runner the transaction is
   * on, so their statements are that transaction's code's. One at a time (`inTurn`), and only
   * the innermost transaction ends (a commit of another is put off: `commitLater`).
   */
  private async asOwner<T>(
    owner: unknown,
    work: () => Promise<T>,
    around: CommitSteps = {},
  ): Promise<T> {
    const internals = this.runner as unknown as RunnerInternals;
    const own = internals.broadcaster as Broadcasting;
    const viewed = (owner as { broadcaster?: Broadcasting } | undefined)?.broadcaster;
    const base = owner !== this.runner && viewed !== undefined ? viewed : own;
    if (base === own && Object.keys(around).length === 0) return work();
    // TypeORM's own commit broadcasts `beforeTransactionCommit`, releases the savepoint, then
    // broadcasts `afterTransactionCommit`: what its own COMMIT would check and end goes
    // between, after the subscribers' last writes and before what they do after it.
    const broadcaster: Broadcasting = Object.create(base as object, {
      broadcast: {
        value: async (event: string, ...args: unknown[]) => {
          if (event === 'AfterTransactionCommit') {
            await around.afterRelease?.();
            hold?.releasedNow();
          }
          if (event === 'AfterTransactionRollback') hold?.releasedNow();
          if (event === 'AfterTransactionStart') around.started?.();
          const ending =
            event === 'BeforeTransactionCommit' || event === 'BeforeTransactionRollback';
          if (ending) {
            // A start its subscribers ask without awaiting waits for the RELEASE or ROLLBACK TO
            // (`CommitHold`).
            hold = new CommitHold();
            this.commitHold = hold;
          }
          // A transaction its subscribers start and leave open is refused before the step
          // TypeORM sends after them names its savepoint (`SubscriberWatch`).
          const watched = WATCHED_EVENTS.get(event);
          const watch = watched
            ? new SubscriberWatch(watched, internals.transactionDepth)
            : undefined;
          // Each of the ending event's subscribers called apart: a start is told apart by the
          // subscriber that asked it (`CommitHold`).
          const broadcasting = hold && ending ? callingOneByOne(base, event, hold) : base;
          const broadcast = () => base.broadcast.call(broadcasting, event, ...args);
          // Run when its code's commit was put off (`commitPutOff`): not again.
          const ran =
            (event === 'BeforeTransactionCommit' && around.subscribersRan !== undefined) ||
            (event === 'AfterTransactionCommit' && around.subscribersRan === 'both');
          // `afterTransactionCommit`: told once the request committed (`whenTold`).
          const later = !ran && whenTold(event) === 'after-request-commit';
          // Its savepoint released (TypeORM lowers the depth before this event): its work now
          // lives at the runner's depth, undone if a savepoint there is rolled back to.
          if (later) this.afterCommit.note(owner as QueryRunner, internals.transactionDepth);
          try {
            if (!ran && !later) await (watch ? this.watches.run(watch, broadcast) : broadcast());
          } finally {
            if (ending) {
              hold?.subscribersReturned();
              if (this.commitHold === hold) this.commitHold = undefined;
            }
          }
          if (watch?.leftOpen(internals.transactionDepth)) {
            throw this.refuse(new SubscriberTransactionOpenError(watch.event));
          }
          if (event === 'BeforeTransactionCommit') await around.beforeRelease?.();
          if (event === 'BeforeTransactionRollback') around.rollingBack?.();
        },
      },
    }) as Broadcasting;
    let hold: CommitHold | undefined;
    const depth = internals.transactionDepth;
    internals.broadcaster = broadcaster;
    try {
      return await work();
    } finally {
      internals.broadcaster = own;
      // Ended (its RELEASE or ROLLBACK TO sent): its held starts run. Failed before it, the
      // transaction still open: they wait for its end that follows (`heldPastFailedEnd`).
      if (hold && internals.transactionDepth >= depth && depth > 1) {
        this.heldPastFailedEnd.push({ hold, depth });
      } else hold?.releasedNow();
    }
  }

  /**
   * A held start's wait (`CommitHold.startMayRun`), bounded as every turn's is: a subscriber
   * of the same event awaiting it would wait for the RELEASE that waits for that subscriber.
   * Past the module's deadline it is refused (`NestedTurnTimeoutError`), the request with it.
   */
  private heldStart(mayRun: Promise<boolean>): Promise<boolean> {
    if (!Number.isFinite(this.timeoutMs)) return mayRun;
    let timer: ReturnType<typeof setTimeout> | undefined;
    const timedOut = new Promise<never>((_resolve, reject) => {
      timer = setTimeout(
        () => reject(this.refuse(new NestedTurnTimeoutError(this.timeoutMs))),
        this.timeoutMs,
      );
      timer.unref?.();
    });
    return Promise.race([mayRun, timedOut]).finally(() => clearTimeout(timer));
  }

  /**
   * A nested commit put off (another's transaction, begun after it, still open: see
   * `commitLater`): for its code it commits now, as without the library, and so its commit's
   * `beforeTransactionCommit` subscribers run now (unless they ran already); its
   * `afterTransactionCommit` ones are told once the request committed, as every nested
   * commit's (`AfterRequestCommit`). Only its RELEASE and what its own COMMIT ends wait
   * for the other's end (`releaseCommitted`, which runs them no more). Their statements
   * through `event.manager` run inside the other's savepoint, judged as the transaction's own
   * beside it (`judge`). A `beforeTransactionCommit` subscriber that throws refuses the
   * commit, as in TypeORM, but its savepoint holds the other's: it cannot be rolled back alone
   * on the one connection, and the request is refused in words naming that.
   */
  private async commitPutOff(from: unknown, beforeRan: boolean): Promise<void> {
    if (!beforeRan) await this.putOffSubscribers(from, 'BeforeTransactionCommit');
    // Its savepoint, still open, is released into the one around it (`releaseCommitted`).
    const own = this.nested.depthOf(from as object);
    const internals = this.runner as unknown as RunnerInternals;
    const into = (own ?? internals.transactionDepth) - 1;
    this.nested.commitLater(from as object, true);
    // Its `afterTransactionCommit`: told once the request committed (`whenTold`), never
    // inside the other's savepoint, which may still roll back (adversary 80b), and not if
    // the savepoint around its own is rolled back to (adversary 82: `noteAfterEnd`).
    this.afterCommit.note(from as QueryRunner, into);
  }

  /** `event`'s subscribers of a put-off commit (`commitPutOff`), as the view's broadcaster calls them. */
  private async putOffSubscribers(from: unknown, event: 'BeforeTransactionCommit'): Promise<void> {
    const internals = this.runner as unknown as RunnerInternals;
    const viewed = (from as { broadcaster?: Broadcasting } | undefined)?.broadcaster;
    const broadcaster =
      from !== this.runner && viewed !== undefined
        ? viewed
        : (internals.broadcaster as Broadcasting);
    try {
      await broadcaster.broadcast(event);
    } catch (error) {
      if (event === 'BeforeTransactionCommit') {
        this.refuse(
          'a beforeTransactionCommit subscriber refused the commit of a nested transaction ' +
            'while another, begun after it through another query runner, is still open: its ' +
            "savepoint holds that one's, and cannot be rolled back alone on the request's " +
            `connection (${String(error)})`,
        );
      }
      throw error;
    }
  }

  /** TypeORM 1's option; 0.3 has none, and the server's default applies. */
  protected override configuredLevel(): string | undefined {
    return (this.dataSource.options as { isolationLevel?: string }).isolationLevel;
  }

  /**
   * A runner of the DataSource's own whose first statement waits for the commit under way:
   * it then runs apart if the request committed, and is refused if it rolled back.
   */
  private runnerAfterEnd(): QueryRunner {
    return this.runnerApart((work) => this.afterEnd(work));
  }

  /** A runner of the DataSource's own whose connection is taken through `wait`. */
  private runnerApart(wait: <T>(work: () => Promise<T>) => Promise<T>): QueryRunner {
    const runner = ownQueryRunner(this.dataSource);
    const internals = runner as unknown as RunnerInternals;
    const connect = runner.connect.bind(runner);
    internals.connect = () => wait(connect);
    return runner;
  }

  /**
   * What a view's `connect()` hands its code once the request committed: a connection of the
   * pool of its own (one per view, as a runner holds one), waited for as the app's pool waits
   * (work left running would wait in its queue without the library, not under the library's
   * deadline).
   */
  private async clientAfterEnd(view: object): Promise<PoolClient> {
    const held = this.clientsAfterEnd.get(view);
    if (held) return held;
    const client = await acquire(this.pool(), 'as-the-pool');
    // Two `connect()` at once: one connection, as for a runner.
    const raced = this.clientsAfterEnd.get(view);
    if (raced) {
      client.release();
      return raced;
    }
    this.clientsAfterEnd.set(view, client);
    return client;
  }

  /**
   * TypeORM's runner, set up to look like an open transaction from the start, so that what
   * code in the scope does with it nests: its `startTransaction()` is a savepoint, its commit
   * releases the savepoint, and its `release()` leaves the connection to us. Nothing its code
   * sends ends the request's transaction: a commit or rollback with no savepoint of its own
   * open, and `COMMIT`, `ROLLBACK`, `BEGIN`… sent as SQL, are refused (and the request can
   * then only roll back), since what followed would commit on its own, outside it.
   */
  private ensureRunner(): QueryRunner {
    if (this.ended) throw new TransactionEndedError();
    if (this.runner) return this.runner;
    const runner = ownQueryRunner(this.dataSource);
    const internals = runner as unknown as RunnerInternals;
    internals.isTransactionActive = true;
    internals.transactionDepth = 1;
    // Past the end (a runner an event listener made while the request was open, then
    // connected after it committed, as TypeORM's manual-transaction recipe does): its
    // `connect()` hands a connection of its own (`connectFrom`); its transaction moves to a
    // runner of its own at `startTransaction()`, its statements outside one run apart
    // (`viewOf`), and after a rollback it is refused.
    // One client for `connect()` before the first statement, whose `open` (the connection,
    // with the listeners its code added meanwhile) every later `connect()` goes through.
    let unopened: { client: PoolClient; open: () => Promise<PoolClient> } | undefined;
    const connect = (): Promise<unknown> => {
      if (this.ended) return this.afterEnd(() => Promise.resolve(undefined));
      if (this.begun) return unopened ? unopened.open() : this.open(internals);
      unopened ??= this.unopened(internals);
      return Promise.resolve(unopened.client);
    };
    // Called on a view (its code's `runner.connect()`, for the node-postgres client): a client
    // whose statements are that view's, judged beside its nested transactions as through its
    // `query()`. TypeORM's own calls (its `query()`, on the runner) get the client itself.
    // Past the end, its code's `connect()` (a runner made while the request was open, its
    // client used after the answer: pg's own API): once the request committed, a connection
    // of its own, as without the library, given back at the view's `release()`; refused after
    // a rollback, or inside a nested transaction that the end cut short (`apart`).
    const connectFrom = (view: unknown) => {
      if (view === runner) return connect();
      // Used from another scope that it does not join: a connection of its own, now.
      const away = this.elsewhereNow();
      if (away) return away(() => this.clientAfterEnd(view as object));
      if (this.ended) {
        return this.apart(internals.transactionDepth > 1, () =>
          this.clientAfterEnd(view as object),
        );
      }
      return connect().then((client) => (client ? this.clientOf(view, client) : client));
    };
    internals.connect = function (this: unknown) {
      return connectFrom(this);
    };
    const releaseOf = this.clientsAfterEnd;
    internals.release = function (this: unknown) {
      const client = releaseOf.get(this as object);
      releaseOf.delete(this as object);
      client?.release();
      return Promise.resolve();
    };
    const start = runner.startTransaction.bind(runner);
    // Called on a view (see `viewOf`): `this` is the view its code goes through. In turn with
    // the other starts, commits and rollbacks (`inTurn`): TypeORM names a savepoint by the
    // depth it starts at.
    const startFrom = (owner: unknown, level?: string) => {
      this.startsUnderWay++;
      // Asked by a `beforeTransactionCommit` or `beforeTransactionRollback` subscriber of the
      // end under way (see `CommitHold`).
      const hold = this.turns.within ? this.commitHold : undefined;
      // Asked by a transaction event's subscribers: counted while it runs (`SubscriberWatch`),
      // unless it waits for the end they were told of.
      const watch = this.watches.getStore();
      let settled = hold ? undefined : watch?.startBegan();
      // Its subscriber's call read as it is asked. The wait is before its turn is asked, not
      // in it: held past a failed commit, it waits for that transaction's rollback, which
      // would queue behind it (the commit's turn lasting while it ran).
      const mayRun = hold?.startMayRun();
      const waited = mayRun
        ? this.heldStart(mayRun).then((held) => {
            if (!held) settled = watch?.startBegan();
          })
        : undefined;
      const started = this.inOrder(
        owner,
        async () => {
          // Being started from its turn's start on: an earlier transaction's end asked meanwhile
          // from outside the turn is decided on arrival (`endsOnArrival`), as if it were open.
          const outer = this.startingFor;
          this.startingFor = owner;
          try {
            await startNow(owner, level);
          } finally {
            this.startingFor = outer;
            // A commit put off while it started, released if its start failed (else at its end).
            await releaseCommitted();
          }
        },
        waited,
      );
      const done = () => {
        this.startsUnderWay--;
        settled?.();
      };
      void started.then(done, done);
      return started;
    };
    const startNow = async (owner: unknown, level?: string) => {
      this.failedStartAt = undefined;
      const depth = internals.transactionDepth;
      const active = internals.isTransactionActive;
      try {
        const beside = depth > 1 && !isPersisting() && this.nested.besideAll(owner as object);
        // A level for a savepoint nested in its own is ignored, as TypeORM does.
        if (asksIsolation(depth, beside)) await this.askIsolation(level);
        // Its code's outermost transaction, a transaction of its own without the library: its
        // role, session authorization and search path are kept, to be put back at its COMMIT
        // (a savepoint's RELEASE keeps a SET LOCAL; see keepNestedState), before it starts, so
        // that a subscriber's `afterTransactionStart` is inside what is put back. Not a save's
        // own (TypeORM's statements and listeners set no role): two round trips each, as
        // without the library (START TRANSACTION, COMMIT), not four.
        if (depth === 1) {
          this.nestedCommit = new NestedCommit();
          this.saveKept = false;
          this.outermostKept = !isPersisting();
          if (this.outermostKept) await this.keepState(OUTERMOST_KEPT_AS);
        }
        // Its role, session authorization and search path, and when it began (the cursors
        // opened in it), kept to be put back at its COMMIT as for the outermost: a round
        // trip, only for such a transaction, before it starts (a subscriber's
        // `afterTransactionStart` is inside what is put back).
        if (beside) await this.keepState(besideName(depth + 1));
        // Open from its `afterTransactionStart` on: what a subscriber sets there is its own.
        let started = false;
        await this.asOwner(
          owner,
          () => start(level as Parameters<QueryRunner['startTransaction']>[0]),
          {
            started: () => {
              started = true;
              // Begun inside every savepoint another runner's code set by hand.
              this.ownSavepoints.workOf(owner as object);
              this.nested.started(owner as object, beside);
              if (beside) {
                this.besideDepths.add(depth + 1);
                this.besideCommits.set(depth + 1, new NestedCommit(true));
              }
            },
          },
        );
        if (!started) this.nested.started(owner as object, beside);
      } catch (error) {
        if (internals.transactionDepth === depth) this.failedStartAt = depth;
        // TypeORM's failed start (a `beforeTransactionStart` subscriber threw) marks the
        // runner as having no transaction: it is the request's, whose transaction is open.
        internals.isTransactionActive = active;
        throw error;
      }
    };
    internals.startTransaction = function (this: unknown, level?: string) {
      return startFrom(this, level);
    };
    const commit = runner.commitTransaction.bind(runner);
    const commitFrom = async (from: unknown, beforeRan = false) => {
      if (internals.transactionDepth <= 1) {
        throw this.refuse('commitTransaction() with no startTransaction()');
      }
      // Another view's begun after it still open: released once that one ended (`commitLater`).
      const later = this.nested.ending(from as object, 'commit') === 'not-innermost';
      if (later && this.nested.hasUncommitted(from as object)) {
        return this.commitPutOff(from, beforeRan);
      }
      this.refuseOutOfOrder(from, 'commit');
      const depth = internals.transactionDepth;
      const outermost = depth === 2;
      /** Whether its deferred work ran (`deferredCheck`): the modes are then put back. */
      let checked = false;
      const subscribersRan = this.nested.ranSubscribersOf(from as object)
        ? 'both'
        : beforeRan
          ? 'before'
          : undefined;
      this.releasedFor = undefined;
      try {
        await this.asOwner(from, commit, {
          ...(subscribersRan ? { subscribersRan } : {}),
          ...(outermost
            ? {
                // Its deferred checks, as its own COMMIT would (a round trip, only where the
                // database has deferrable constraints), after `beforeTransactionCommit`.
                // Not in a read-only one (`SET TRANSACTION READ ONLY` in it): what was
                // deferred before it would be refused there (25006).
                beforeRelease: async () => {
                  const check = this.readOnlyFrom === 2 ? undefined : deferredCheck();
                  if (check) await internals.query(check);
                  checked = check !== undefined;
                },
                // What its own COMMIT would end, before `afterTransactionCommit`; the role
                // first (see `endingText`).
                afterRelease: async () => {
                  const ending = [
                    this.outermostKept || this.saveKept
                      ? this.restoreState(OUTERMOST_KEPT_AS)
                      : undefined,
                    checked ? deferredAgain() : undefined,
                    this.nestedCommit.endingText(this.outermostKept),
                  ].filter((text) => text !== undefined);
                  if (ending.length > 0) await internals.query(ending.join('; '));
                },
              }
            : this.besideDepths.has(depth)
              ? {
                  // Begun beside another (see `besideDepths`): its role and settings put back,
                  // and the cursors opened in it closed, as its own COMMIT would.
                  afterRelease: async () => {
                    const commit = this.besideCommits.get(depth) ?? new NestedCommit();
                    const ending = [
                      this.restoreState(besideName(depth)),
                      commit.endingText(
                        true,
                        besideName(depth),
                        this.keptStates.get(besideName(depth))?.began,
                      ),
                    ].filter((text) => text !== undefined);
                    await internals.query(ending.join('; '));
                  },
                }
              : {}),
        });
      } catch (error) {
        // Failed after its RELEASE (its COMMIT's put-backs): committed.
        if (internals.transactionDepth < depth) this.releasedFor = from;
        throw error;
      } finally {
        this.nestedEnded(internals.transactionDepth, internals.transactionDepth < depth);
        this.afterCommit.nestedEnded(internals.transactionDepth, 'released');
        this.ownSavepoints.nestedEnded(internals.transactionDepth);
      }
    };
    // A commit put off (`commitLater`) whose transaction is the innermost again, once the
    // ones begun after it ended: its savepoint released now, in the turn of the end that made
    // it so. Its code was told it committed: a failure now (its deferred checks, a subscriber)
    // leaves the request only a rollback.
    const releaseCommitted = async () => {
      for (let owner = this.nested.committedInnermost(); owner;) {
        const depth = internals.transactionDepth;
        try {
          await commitFrom(owner);
        } catch (error) {
          this.refuse(
            `a nested transaction's commit put off until another ended (${String(error)})`,
          );
        }
        if (internals.transactionDepth >= depth) return;
        owner = this.nested.committedInnermost();
      }
    };
    const commitInTurn = async (from: unknown, beforeRan = false): Promise<void> => {
      // Put off on arrival, not in turn: it sends nothing, and the turn under way may be
      // awaiting it (a `beforeTransactionCommit` or `beforeTransactionStart` subscriber of the
      // transaction begun after it, awaiting this one's end): queued behind that turn, it
      // would wait for itself. The end of the one after it releases it (`releaseCommitted`),
      // or the end of its start's turn, when that start failed. Its commit's subscribers run
      // now (`commitPutOff`); the other may have ended while `beforeTransactionCommit`'s ran:
      // asked again, it then commits in turn, without running them twice.
      if (
        internals.transactionDepth > 1 &&
        this.endsOnArrival(from) &&
        this.nested.hasUncommitted(from as object)
      ) {
        if (beforeRan) return this.commitPutOff(from, true);
        await this.putOffSubscribers(from, 'BeforeTransactionCommit');
        return commitInTurn(from, true);
      }
      return this.inOrder(from, async () => {
        try {
          await commitFrom(from, beforeRan);
        } finally {
          await releaseCommitted();
        }
      });
    };
    internals.commitTransaction = function (this: unknown) {
      return commitInTurn(this);
    };
    const rollback = runner.rollbackTransaction.bind(runner);
    const rollbackFrom = async (from: unknown) => {
      if (internals.transactionDepth <= 1) {
        // TypeORM's own rollback after a commit that failed once committed (its
        // `transaction()` and a save's, which swallow its error): without the library the
        // runner has no transaction then, and the rollback fails with this error alone.
        if (this.releasedFor === from) {
          this.releasedFor = undefined;
          throw transactionNotStarted();
        }
        throw this.refuse('rollbackTransaction() with no startTransaction()');
      }
      this.refuseOutOfOrder(from, 'rollback');
      try {
        // Judged again as its ROLLBACK TO is sent: a statement sent beside it while its
        // subscribers' `beforeTransactionRollback` ran is inside it too.
        await this.asOwner(from, rollback, {
          rollingBack: () => {
            if (this.nested.ending(from as object, 'rollback') === 'beside') {
              this.refuse(new StatementBesideNestedTransactionError());
            }
          },
        });
      } finally {
        this.nestedEnded(internals.transactionDepth);
        // The commits released inside it are undone with it (adversary 82).
        this.afterCommit.nestedEnded(internals.transactionDepth, 'rolled-back');
        this.ownSavepoints.nestedEnded(internals.transactionDepth);
      }
      // Rolled back to its savepoint: a failure inside it no longer aborts the transaction.
      this.lastError = undefined;
    };
    const rollbackInTurn = (from: unknown) => {
      // TypeORM's own rollback after a put-off commit that failed once committed for its code
      // (see `commitPutOff`): nothing of its own to roll back.
      if (this.releasedFor === from && this.nested.putOff(from as object)) {
        this.releasedFor = undefined;
        return Promise.reject(transactionNotStarted());
      }
      // Asked as its start failed (before another start could run): its savepoint was never
      // made, and there is nothing of its own to roll back. (When the SAVEPOINT failed because
      // the transaction was aborted, the commit fails anyway.)
      if (this.failedStartAt === internals.transactionDepth) {
        this.failedStartAt = undefined;
        return Promise.resolve();
      }
      // Refused on arrival, not in turn, when another's transaction begun after it is open (or
      // being started: see `startingFor`): it sends nothing, and the turn under way may be
      // awaiting its end (a `beforeTransactionCommit` or `beforeTransactionStart` subscriber
      // of that other transaction): queued behind that turn, it would wait for itself.
      if (internals.transactionDepth > 1 && this.endsOnArrival(from)) {
        return Promise.reject(
          this.refuse(
            'rollbackTransaction() of a nested transaction while another, begun after it ' +
              'through another query runner, is still open (or being started)',
          ),
        );
      }
      return this.inOrder(from, async () => {
        try {
          await rollbackFrom(from);
        } finally {
          await releaseCommitted();
        }
      });
    };
    internals.rollbackTransaction = function (this: unknown) {
      return rollbackInTurn(this);
    };
    const query = runner.query.bind(runner) as (...args: unknown[]) => Promise<unknown>;
    // Before a statement of its code's nested transactions: what it leaves that the
    // outermost one's COMMIT would end (see `NestedCommit`).
    const keepSettings = (from: unknown, args: unknown[]): Promise<void> =>
      this.commitOf(from).before(
        args[0],
        Array.isArray(args[1]) ? (args[1] as unknown[]) : undefined,
        async (names) =>
          (await query(READ_SETTINGS, [names])) as {
            name: string;
            value: string | null;
          }[],
      );
    // A save's own transaction keeps no state at its start (TypeORM's statements set none: two
    // round trips, not four), until a statement in it would set some: its subscribers' and
    // listeners' (a tenant's `SET LOCAL search_path`, `SET LOCAL ROLE`), kept just before it,
    // sent as `keepSettings`' reads are (inside its start's turn: adversary 88).
    const keepSaveState = async (text: unknown): Promise<void> => {
      if (this.outermostKept || this.saveKept || !setsIdentity(text)) return;
      this.saveKept = true;
      const rows = (await query(keepNestedState(OUTERMOST_KEPT_AS))) as KeptNestedState[];
      if (rows[0]) this.keptStates.set(OUTERMOST_KEPT_AS, rows[0]);
    };
    // `from`: the view it came through (see `viewOf`), or the runner for the library's own.
    const queryFrom = async (from: unknown, args: unknown[]) => {
      // A view used from another scope that it does not join (`outside()`, no request's while
      // its own is open): on its own, as without the library (`elsewhereNow`).
      const away = from === runner ? undefined : this.elsewhereNow();
      if (away) return away(() => this.readAlone(args, false, 'as-the-pool'));
      if (this.ended) {
        return this.apart(internals.transactionDepth > 1, () =>
          this.readAlone(args, false, 'as-the-pool'),
        );
      }
      const refused = this.refusalOf(args[0]);
      if (refused) throw refused;
      // `SET TRANSACTION ISOLATION LEVEL` in its code's own transaction (TypeORM's recipe with
      // the level in SQL): the request's transaction is that transaction, already begun by its
      // savepoint, so PostgreSQL would refuse it (25001) on every try. Asked as its level:
      // answered as a `SET` where the transaction runs at it or above, else refused with what
      // to write instead (adversary 88).
      const control = from !== runner && internals.transactionDepth > 1 && nestedControlOf(args[0]);
      if (control && control.kind === 'set-isolation') {
        await this.levelSetInSql(control.level);
        return args[2] === true ? { records: [], raw: [] } : [];
      }
      // A read before the first write needs no transaction: it borrows a connection for
      // itself alone, so a handler that reads, then waits on something else, holds none while
      // it waits. A locking read (`FOR UPDATE`) opens the transaction, as its lock must last,
      // and so does any read of a transaction above READ COMMITTED, whose reads count.
      if (
        !this.openedByCode &&
        !isAboveReadCommitted(this.plannedLevel()) &&
        isPlainRead(args[0])
      ) {
        // In a read-only transaction of its round trip: one that would write (a view's
        // function, a cast's) runs in the request's transaction instead, as a write does.
        const apart = await this.readAlone(args, true).then(
          (result) => ({ result }),
          (error: unknown) => {
            if (isReadOnlyError(error)) return undefined;
            throw error;
          },
        );
        if (apart) return apart.result;
      }
      const judged = this.judge(from, args[0], args[1]);
      if (judged === 'alone') return this.readAlone(args);
      const nested = internals.transactionDepth > 1 && from !== runner;
      // Its connection opened here, before TypeORM's query() (whose connect() would answer the
      // client that opens at its first statement): a failure to connect (the database down)
      // reaches the caller as the library marked it, not wrapped in a QueryFailedError.
      const prepare = async () => {
        if (nested) await keepSaveState(args[0]);
        if (nested) await keepSettings(from, args);
        if (!this.begun) await this.open(internals);
      };
      // A view's statements in the order called (`SendOrder`): one that reads its settings
      // first is not overtaken by the next, sent without awaiting it.
      // Judged inside while the transaction was open, it may reach TypeORM's `connect()` only
      // after the end (unawaited, its turns behind a commit that had nothing on the wire to
      // wait for): it then runs apart, as work started after the answer does, never on the
      // ended transaction's runner, which has no connection to give (adversary 87).
      const send = () =>
        this.ended
          ? this.apart(nested, () => this.readAlone(args, false, 'as-the-pool'))
          : (query(...args) as Promise<unknown>);
      let sent: Promise<unknown>;
      if (from === runner) {
        await prepare();
        sent = send();
      } else {
        ({ sent } = await this.sendOrder.after(from as object, prepare, send));
      }
      try {
        const result = await sent;
        judged.ran();
        this.noteSuccess(args[0]);
        return result;
      } catch (error) {
        judged.failed(error);
        // A write refused in a transaction that began read-write is its code's own mistake
        // (`noteFailure`, by `beganReadOnly`), a nested READ ONLY's as any other.
        this.noteFailure(error);
        throw error;
      }
    };
    // The library's own (and TypeORM's SAVEPOINT, RELEASE…): a turn's wire step, not its
    // code's (see `TurnQueue.onWire`).
    const turns = this.turns;
    internals.query = function (this: unknown, ...args: unknown[]) {
      if (this !== runner) return queryFrom(this, args);
      // TypeORM's savepoints named as without the library (`typeormSavepointAsWithout`).
      args[0] = typeormSavepointAsWithout(args[0]);
      return turns.onWire(() => queryFrom(this, args));
    };
    this.keepSettingsOf = keepSettings;
    this.keepSaveStateOf = keepSaveState;
    const stream = runner.stream.bind(runner) as (...args: unknown[]) => Promise<unknown>;
    const streamFrom = async (from: unknown, args: unknown[]) => {
      const away = from === runner ? undefined : this.elsewhereNow();
      if (away) return away(() => this.streamAlone(args));
      // Past the end (a repository held by work the handler left running): as its other
      // statements (`queryFrom`), once the request committed, on a runner of its own.
      if (this.ended) {
        return this.apart(internals.transactionDepth > 1, () => this.streamAlone(args));
      }
      // A stream cannot be sent apart: a transaction's mode alone in one is refused.
      const judged = this.judge(from, args[0], args[1]);
      if (judged === 'alone') throw this.refuse(new ReadOnlyTransactionRefusedError());
      // Its rows are read after it is handed back: what it does to the savepoints is taken as
      // done once it was handed to node-postgres.
      const handed = <T>(sent: Promise<T>) =>
        sent.then(
          (result) => {
            judged.ran();
            return result;
          },
          (error: unknown) => {
            judged.failed(error);
            throw error;
          },
        );
      // A stream is handed to node-postgres as an object, which `beginWith` cannot carry: its
      // BEGIN goes first, alone, so that a failed BEGIN never leaves it running outside.
      const prepare = async () => {
        await this.open(internals);
        await this.begin(await this.opening!);
      };
      if (from === runner) {
        await prepare();
        return handed(stream(...args));
      }
      // In the order called with the view's other statements (`SendOrder`).
      const { sent } = await this.sendOrder.after(from as object, prepare, () =>
        handed(stream(...args)),
      );
      return sent;
    };
    internals.stream = function (this: unknown, ...args: unknown[]) {
      return streamFrom(this, args);
    };
    this.runner = runner;
    // Its code's own when they reach it (a subscriber's `event.manager` for the library's own
    // statements and its transaction events): a view's, as what comes through any view.
    internals.manager = this.viewOf(runner).manager;
    return runner;
  }

  /**
   * A statement beside a nested transaction of its code that set its role (or search path)
   * would run inside it, as that role (on the request's one connection there is no other
   * place), where without the library it runs on a connection of its own: refused, the request
   * with it, rather than run as another role in silence (row-level security would hide rows
   * from it). As on the pool seam (`PoolTransaction.refuseBesideIdentity`).
   */
  private refuseBesideIdentity(from: unknown, text: unknown, values?: unknown): void {
    const beside = this.nested.besideIdentity(
      from as object,
      text,
      Array.isArray(values) ? values : undefined,
    );
    if (beside) {
      throw this.refuse(
        new StatementBesideNestedTransactionError(beside === 'identity' ? true : beside),
      );
    }
  }

  /** A hand-written savepoint statement that would reach another query runner's (see `judge`). */
  private refuseAcrossRunners(
    from: object,
    owner: object,
    text: unknown,
    controls: readonly (SavepointControl | null)[] | undefined,
  ): void {
    const around = {
      innermostOthers: this.nested.innermostOthers(from),
      othersDeeperThan: (depth: number) => this.nested.othersDeeperThan(from, depth),
    };
    for (const control of controls ?? []) {
      const refusal = control && this.ownSavepoints.refusalOf(owner, control, around);
      if (refusal) {
        throw this.refuse(new SavepointAcrossRunnersError(refusal, String(textOf(text))));
      }
    }
  }

  /**
   * How a statement of its code, sent through `from` (a view, the runner itself for the
   * library's own, or a view's node-postgres client), is judged before it is sent, whichever
   * way it came (`queryFrom`, `streamFrom`, `clientOf`): one path, so that no way round it
   * escapes a rule. Throws the refusal (the request with it); `alone` when it is a
   * transaction's mode sent outside any transaction of its code, which without the library
   * runs where it does nothing (in the request's it would make the transaction that stores
   * the answer read only): the caller sends it apart. Else `inside`, with what it sets noted:
   * the nested transactions it runs beside marked, and a nested transaction it makes read only
   * known so until it ends (`readOnlyFrom`: its COMMIT then runs no deferred check, and a
   * lease renewal sends no write into it).
   */
  private judge(from: unknown, text: unknown, values: unknown): 'alone' | Inside {
    const refused = this.refusalOf(text);
    if (refused) throw refused;
    const depth = (this.runner as unknown as RunnerInternals | undefined)?.transactionDepth ?? 1;
    if (depth <= 1 && isTransactionModeOnly(text)) return 'alone';
    // With other statements, it would last to the request's COMMIT: refused.
    if (depth <= 1 && setsReadOnly(text)) throw this.refuse(new ReadOnlyTransactionRefusedError());
    this.refuseBesidePhase();
    this.refuseBehindStream();
    if (from !== this.runner) {
      this.refuseBesideIdentity(from, text, values);
      this.nested.markBeside(from as object, text);
    }
    // `SET TRANSACTION READ ONLY` inside a nested transaction: read only until it ends.
    if (depth > 1 && this.readOnlyFrom === undefined && setsReadOnly(text)) {
      this.readOnlyFrom = depth;
    }
    // Its savepoints and TypeORM's, by name: a `ROLLBACK TO` of one undoes the nested commits
    // released inside it (`AfterRequestCommit.savepointSent`). Marked once the text answered,
    // and only those PostgreSQL ran (`controlsRan`): a RELEASE that failed, or never ran
    // after a failing statement, ends no savepoint (adversary 85).
    const controls = savepointControlsOf(text);
    const own = from !== this.runner;
    // Its hand-written ones, beside another query runner's on the one connection: refused
    // where they would reach that one's savepoints or work (`RunnerSavepoints`), by the
    // runner whose transaction they are in (the request's own code's, outside any).
    const owner = this.nested.depthOf(from as object) === undefined ? REQUEST_CODE : from;
    if (own) this.refuseAcrossRunners(from as object, owner as object, text, controls);
    const mark = (outcome: TextOutcome) => {
      for (const control of controls ? controlsRan(controls, outcome) : []) {
        this.afterCommit.savepointSent(control, depth, own);
        if (own) this.ownSavepoints.ran(owner as object, control, depth);
      }
    };
    return {
      ran: () => {
        mark('ran');
        if (own && !controls && !isPlainRead(text)) this.ownSavepoints.workOf(owner as object);
      },
      failed: (error) => mark(isTransactionAbortedError(error) ? 'aborted' : 'failed'),
    };
  }

  /**
   * The node-postgres client as `view` hands it to its code: each statement on it judged as
   * one through the view's `query()` (`judge`: refused beside a nested transaction that set
   * its role, a setting or READ ONLY, marking those it runs inside; a transaction's mode alone
   * outside any nested transaction sent apart), then sent as it is. What the client is
   * otherwise (its events, its other methods) is the client's.
   */
  clientOf(view: unknown, client: object): object {
    const query = (client as { query: (...args: unknown[]) => unknown }).query;
    const judged = (...args: unknown[]): unknown => {
      // Judged to run inside: what it does to the savepoints noted once it answered.
      let verdict: 'alone' | Inside | undefined;
      const send = () =>
        verdict === undefined || verdict === 'alone'
          ? query.apply(client, args)
          : sentWatched(query, client, args, verdict);
      if (this.ended) return send();
      const text = textOf(args[0]);
      const values = Array.isArray(args[1]) ? args[1] : valuesOf(args);
      const depth = (this.runner as unknown as RunnerInternals | undefined)?.transactionDepth ?? 1;
      // Its level said in SQL inside its own transaction: asked as through the view's
      // `query()` (`queryFrom`), joined and answered as a `SET`, or refused (adversary 90).
      const control = depth > 1 && !isSubmittable(args[0]) && nestedControlOf(text);
      if (control && control.kind === 'set-isolation') {
        return answered(args, () => this.levelSetInSql(control.level).then(() => SET_ANSWER));
      }
      try {
        verdict = this.judge(view, text, values);
        // A stream cannot be sent apart (its rows are read after the call returns).
        if (verdict === 'alone' && isSubmittable(args[0])) {
          throw this.refuse(new ReadOnlyTransactionRefusedError());
        }
      } catch (error) {
        return refusedStatement(args, error);
      }
      if (verdict === 'alone') return answered(args, (own) => this.sendAlone(own));
      const keepSettings = this.keepSettingsOf;
      const keepSaveState = this.keepSaveStateOf;
      if (depth <= 1 || !keepSettings) return send();
      // Inside its nested transactions: what it leaves that their COMMIT would end, noted
      // first (see `NestedCommit`), and a save's state kept before it sets its role
      // (`keepSaveState`: adversary 90), as through the view's `query()`; sent in the order
      // called with the view's other statements (`SendOrder`), as node-postgres sends them.
      const ordered = this.sendOrder.after(
        view as object,
        async () => {
          await keepSaveState?.(text);
          await keepSettings(view, [text, values]);
        },
        send,
      );
      if (isSubmittable(args[0])) {
        const submittable = args[0] as {
          handleError?: (error: unknown) => void;
        };
        ordered.catch((error: unknown) => submittable.handleError?.(error));
        return submittable;
      }
      const last = args[args.length - 1];
      if (typeof last === 'function') {
        ordered.catch((error: unknown) => (last as (error: unknown) => void)(error));
        return undefined;
      }
      return ordered.then(({ sent }) => sent);
    };
    // On a target of its own: the client's `query` may be fixed on it (a proxy must answer a
    // fixed property as it is).
    return new Proxy({} as object, {
      get: (_target, key) => {
        if (key === 'query') return judged;
        const value: unknown = Reflect.get(client, key, client);
        return typeof value === 'function' ? (value as () => unknown).bind(client) : value;
      },
      set: (_target, key, value) => Reflect.set(client, key, value),
      has: (_target, key) => Reflect.has(client, key),
    });
  }

  /**
   * Where what `from`'s statement leaves is noted (see `NestedCommit`): the nested transaction
   * of its code begun beside others that it runs in, if any, else the outermost.
   */
  private commitOf(from: unknown): NestedCommit {
    const depth = this.nested.depthOf(from as object);
    for (let at = depth ?? 0; at > 1; at--) {
      const beside = this.besideCommits.get(at);
      if (beside) return beside;
    }
    return this.nestedCommit;
  }

  /**
   * A view ends its nested transaction (`from`, through TypeORM's commit or rollback). Refused
   * (the request with it) when another view's, begun after it, is still open: the savepoints
   * are one stack, and TypeORM names them by depth, so it would end that one instead (two
   * `dataSource.transaction()` at once: the first to fail rolled back the other's work and
   * kept its own). A commit is put off instead (`commitLater`, in `commitFrom`), unless the
   * view has none of its own open. A rollback of one holding a statement sent beside it goes on, but the
   * request can then only roll back: without the library that statement would have committed
   * on a connection of its own (as on the pool seam, `PoolTransaction.rollBack`).
   */
  private refuseOutOfOrder(from: unknown, how: 'commit' | 'rollback'): void {
    const ending = this.nested.ending(from as object, how);
    if (ending === 'not-innermost') {
      throw this.refuse(
        `${how === 'commit' ? 'commitTransaction()' : 'rollbackTransaction()'} of a nested ` +
          'transaction while another, begun after it through another query runner, is still open',
      );
    }
    if (ending === 'beside') this.refuse(new StatementBesideNestedTransactionError());
  }

  /**
   * A statement (or a second stream) sent while a stream of its code is open on the
   * request's connection would wait behind it, and the stream's reader most often awaits it:
   * a hang that holds the key. Refused at once, the request with it (see `OpenStreams`).
   */
  private refuseBehindStream(): void {
    if (this.streams.any) throw this.refuse(new CursorOpenRefusedError());
  }

  /** A level its code set in SQL inside its own transaction: joined, or refused (`queryFrom`). */
  private async levelSetInSql(level: string): Promise<void> {
    try {
      await this.askIsolation(level);
    } catch (error) {
      if (!(error instanceof IsolationLevelRefusedError)) throw error;
      throw new IsolationLevelRefusedError(
        `SET TRANSACTION ISOLATION LEVEL ${level} inside a query runner's transaction comes ` +
          "after the request's transaction began (at its savepoint). Pass the level to " +
          `queryRunner.startTransaction('${level}') or dataSource.transaction('${level}', …), ` +
          `or set it on the route, @Idempotent({ isolationLevel: '${level}' })`,
      );
    }
  }

  /**
   * `readOnly`: its statement in a read-only transaction of its round trip (`readingOnly`).
   * `wait`: `'as-the-pool'` for its code's statement sent past the end (work the handler left
   * running), which without the library waits in the pool's queue: under the library's
   * deadline it was lost when the pool was busy, where the app's pool would have run it a
   * moment later (as on the pool seam, `sendAlone(args, true)`).
   */
  private async readAlone(
    args: unknown[],
    readOnly = false,
    wait: number | 'as-the-pool' = this.timeoutMs,
  ): Promise<unknown> {
    const runner = ownQueryRunner(this.dataSource);
    const internals = runner as unknown as RunnerInternals;
    // Else its connection is waited for at most the module's deadline, as every wait of the
    // library's is: TypeORM's own connect has no bound, and a database that stopped answering
    // held the request (and its key) with no answer at all.
    let client: PoolClient | undefined;
    internals.connect = async () => {
      client ??= await acquire(this.pool(), wait);
      internals.databaseConnection = readOnly ? readingOnly(client) : client;
      return internals.databaseConnection;
    };
    let failure: unknown;
    try {
      return await (runner.query as (...a: unknown[]) => Promise<unknown>)(...args);
    } catch (error) {
      failure = error;
      // TypeORM hands a refused connection on as the socket's error: it is the database's.
      throw markDatabaseFailure(error);
    } finally {
      // A connection whose statement failed is not given to another caller: it may be broken
      // (a write refused in the read-only transaction leaves it as it was).
      const broken = failure !== undefined && !isReadOnlyError(failure);
      client?.release(broken ? asError(failure) : undefined);
      await runner.release();
    }
  }

  /**
   * A stream its code asked for past the end, once the request committed: on a runner of its
   * own (its connection waited for as the app's pool waits: TypeORM's own connect), given
   * back once node-postgres is through with the stream (read to its end, destroyed, failed).
   */
  private async streamAlone(args: unknown[]): Promise<unknown> {
    const runner = ownQueryRunner(this.dataSource);
    let stream: unknown;
    try {
      stream = await (runner.stream as (...a: unknown[]) => Promise<unknown>)(...args);
    } catch (error) {
      await runner.release();
      throw markDatabaseFailure(error);
    }
    const client = (runner as unknown as RunnerInternals).databaseConnection;
    void endOf(stream as object, client).then(() => runner.release());
    return stream;
  }

  /**
   * What `connect()` answers before the first statement (TypeORM's manual-transaction recipe
   * calls it first): a client that opens the connection at its first statement, not now. A
   * `connect()` sends nothing, so it is not the handler's first work: a plain read after it
   * still runs apart, and a nested transaction after it may still ask for its level (with
   * `oneCommit`, the claim then commits alone first), as through `dataSource.query()`.
   */
  private unopened(runner: RunnerInternals): {
    client: PoolClient;
    open: () => Promise<PoolClient>;
  } {
    let opened: PoolClient | undefined;
    /** Listeners its code added before the connection opened: added to it when it does. */
    const listening: [method: string, event: string | symbol, listener: unknown][] = [];
    const open = () =>
      this.open(runner).then((client) => {
        if (!opened) {
          opened = client;
          for (const [method, event, listener] of listening.splice(0)) {
            (client as unknown as Record<string, (e: unknown, l: unknown) => unknown>)[method](
              event,
              listener,
            );
          }
        }
        return client;
      });
    const query = (...args: unknown[]): unknown => {
      // Past the end (work the handler left running holds it): nothing of the request's is
      // sent through it any more. Once the request committed, its statement runs on a
      // connection of its own, as a guarded client's does (`sendNow`); refused after a
      // rollback, or inside a nested transaction the end cut short.
      if (this.ended) return this.sentAfterEnd(runner.transactionDepth > 1, args);
      if (!isSubmittable(args[0])) {
        // A plain read before the first write runs apart, as through the runner's query() or
        // the pool's own client: one round trip in a read-only transaction of its own.
        if (!this.begun && !isAboveReadCommitted(this.plannedLevel()) && isPlainRead(args[0])) {
          return this.readApart(args, () =>
            open().then((client) => (client.query as (...a: unknown[]) => unknown)(...args)),
          );
        }
        return open().then((client) => (client.query as (...a: unknown[]) => unknown)(...args));
      }
      // A stream is handed back as it is (TypeORM's `stream()` reads it at once), and
      // handed to the connection once that is open.
      const submittable = args[0] as { handleError?: (error: unknown) => void };
      open().then(
        (client) => void (client.query as (...a: unknown[]) => unknown)(...args),
        (error: unknown) => submittable.handleError?.(error),
      );
      return submittable;
    };
    const own: Record<string, unknown> = { query, release: () => undefined };
    const stand: PoolClient = new Proxy(own, {
      get: (target, key) => {
        if (typeof key === 'string' && key in target) return target[key];
        if (opened) {
          const value: unknown = Reflect.get(opened, key, opened);
          return typeof value === 'function' ? (value as () => unknown).bind(opened) : value;
        }
        // Before the connection opened: what needs none. Listeners wait for it (a procedure's
        // `RAISE NOTICE` is heard once it runs); escaping is node-postgres' own text work.
        if (key === 'on' || key === 'once' || key === 'addListener' || key === 'prependListener') {
          return (event: string | symbol, listener: unknown) => {
            listening.push([key, event, listener]);
            return stand;
          };
        }
        if (key === 'off' || key === 'removeListener') {
          return (event: string | symbol, listener: unknown) => {
            const at = listening.findIndex(([, e, l]) => e === event && l === listener);
            if (at >= 0) listening.splice(at, 1);
            return stand;
          };
        }
        if (key === 'escapeLiteral' || key === 'escapeIdentifier') {
          return (text: string) => (pg.Client.prototype[key] as (t: string) => string)(text);
        }
        return undefined;
      },
    }) as unknown as PoolClient;
    return { client: stand, open };
  }

  /**
   * A plain read sent through the client `connect()` answered before the first statement: on
   * a connection of its own, read only; one that would write (a view's function) runs in the
   * request's transaction instead (`inside`), as through the runner.
   */
  private async readApart(args: unknown[], inside: () => unknown): Promise<unknown> {
    const client = await acquire(this.pool(), this.timeoutMs);
    let failure: unknown;
    try {
      return await (readingOnly(client).query as (...a: unknown[]) => Promise<unknown>)(...args);
    } catch (error) {
      failure = error;
      if (isReadOnlyError(error)) return inside();
      throw markDatabaseFailure(error);
    } finally {
      const broken = failure !== undefined && !isReadOnlyError(failure);
      client.release(broken ? asError(failure) : undefined);
    }
  }

  /**
   * The connection, on the first statement. TypeORM gets a guarded view of the client: a
   * statement of the handler's that is still on its way when the transaction ends is refused,
   * never sent after the `COMMIT` or on a connection back in the pool. The first statement
   * through it carries the `BEGIN` (at the DataSource's isolation level, if it sets one) in
   * its own round trip (`beginWith`).
   */
  private open(runner: RunnerInternals): Promise<PoolClient> {
    return this.connection().then((client) => {
      const guarded = Object.create(client, {
        query: {
          value: (...args: unknown[]) => {
            // A stream (TypeORM's `stream()`): open from now until it ends.
            if (isSubmittable(args[0])) this.streams.watch(args[0] as object);
            return this.send(client, args, () => runner.transactionDepth > 1);
          },
        },
        // The connection is the request's: it goes back to the pool when the transaction
        // ends, never mid-transaction because code in it released what it was handed.
        release: { value: () => undefined },
      }) as PoolClient;
      runner.databaseConnection = guarded;
      return guarded;
    });
  }
}

/**
 * What node-postgres answers a `SET` with: a level its code set in SQL through its client and
 * joined (`clientOf`) is answered so, as the server would have.
 */
const SET_ANSWER = { command: 'SET', rowCount: null, oid: null, rows: [], fields: [] };

/** The members of TypeORM's PostgresQueryRunner that are set here (public, but readonly). */
/** TypeORM's broadcaster, as far as the library calls it. */
/**
 * A statement judged to run in the request's transaction (`judge`): what it does to the
 * savepoints is noted once it answered, `ran` or `failed` with its error.
 */
interface Inside {
  ran(): void;
  failed(error: unknown): void;
}

/**
 * A statement of its code's node-postgres client sent (`clientOf`), `inside` told once it
 * answered, whichever way it is answered: its promise, or its callback (a copy of `args` with
 * the callback wrapped). A submittable (a cursor, a stream) is taken as run once handed over.
 */
function sentWatched(
  query: (...args: unknown[]) => unknown,
  client: object,
  args: unknown[],
  inside: Inside,
): unknown {
  const last = args[args.length - 1];
  if (typeof last === 'function') {
    const callback = (error: unknown, ...rest: unknown[]) => {
      if (error) inside.failed(error);
      else inside.ran();
      return (last as (...all: unknown[]) => unknown)(error, ...rest);
    };
    return query.apply(client, [...args.slice(0, -1), callback]);
  }
  const result = query.apply(client, args);
  if (isSubmittable(args[0]) || typeof (result as Promise<unknown>)?.then !== 'function') {
    inside.ran();
    return result;
  }
  return (result as Promise<unknown>).then(
    (value) => {
      inside.ran();
      return value;
    },
    (error: unknown) => {
      inside.failed(error);
      throw error;
    },
  );
}

interface Broadcasting {
  broadcast(event: string, ...args: unknown[]): Promise<void>;
}

/** What a nested transaction's commit does around its `RELEASE` (see `asOwner`). */
interface CommitSteps {
  beforeRelease?: () => Promise<void>;
  afterRelease?: () => Promise<void>;
  /** After `afterTransactionStart`'s savepoint, before its subscribers: the transaction is open. */
  started?: () => void;
  /** After `beforeTransactionRollback`'s subscribers, just before the `ROLLBACK TO` is sent. */
  rollingBack?: () => void;
  /**
   * The commit's subscribers that ran when its code's commit was put off (see
   * `commitPutOff`): `before` (`beforeTransactionCommit`) or `both` (and
   * `afterTransactionCommit` noted for after the request's COMMIT); not run again.
   */
  subscribersRan?: 'before' | 'both';
}

interface RunnerInternals {
  isTransactionActive: boolean;
  transactionDepth: number;
  databaseConnection: unknown;
  manager: EntityManager;
  broadcaster: unknown;
  connect(): Promise<unknown>;
  release(): Promise<void>;
  startTransaction(level?: string): Promise<void>;
  commitTransaction(): Promise<void>;
  rollbackTransaction(): Promise<void>;
  query(...args: unknown[]): Promise<unknown>;
  stream(...args: unknown[]): Promise<unknown>;
}

/**
 * TypeORM's own error for a commit or rollback with no transaction (its class is not imported:
 * TypeORM is an optional peer of the library), as its runner throws it.
 */
function transactionNotStarted(): Error {
  const error = new Error(
    'Transaction is not started yet, start transaction before committing or rolling it back.',
  );
  error.name = 'TransactionNotStartedError';
  return error;
}
