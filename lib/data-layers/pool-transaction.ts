import { Logger } from '@nestjs/common';
import { EventEmitter } from 'node:events';
import pg, { type Pool, type PoolClient, type QueryResult } from 'pg';
import { type EntityManager } from 'typeorm';
import { isReadOnlyError, isTransactionAbortedError } from '../connection/connection-errors.js';
import { acquire } from '../connection/deadline.js';
import { retriedTryRefusal } from '../transaction/handler-try.js';
import { readOnly } from '../connection/read-only-query.js';
import { apartStatement } from '../connection/prefixed-query.js';
import { isAboveReadCommitted } from '../transaction/isolation-level.js';
import {
  CursorOpenRefusedError,
  NestedTransactionOpenAtCommitError,
  ListenAmongStatementsRefusedError,
  ReadOnlyTransactionRefusedError,
  ClientTakenElsewhereError,
  KeptClientCommittedElsewhereError,
  KeptClientTransactionGoneError,
  ReleasedClientError,
  type RunnerConnectedOutsideRequestError,
  StatementBesideNestedTransactionError,
  TransactionEndedError,
} from '../transaction/seam-errors.js';
import {
  isPlainRead,
  isTransactionModeOnly,
  nestedControlOf,
  savepointControlsOf,
  type SavepointControl,
  setsReadOnly,
  type StatementStep,
  statementStepsOf,
} from '../transaction/sql/sql-text.js';
import {
  keepNestedState,
  READ_SETTINGS,
  readSettingsAfterRollbackTo,
  restoreNestedState,
  restoreSettings,
} from '../connection/session-state.js';
import { oneShotSettingsOf, type OneShotSettings } from './one-shot-settings.js';

import {
  asError,
  isSubmittable,
  type FencedStatement,
  RequestTransaction,
  textOf,
  valuesOf,
} from '../transaction/request-transaction.js';
import {
  type JoinableTransaction,
  type PoolJoin,
  transactionScope,
} from '../transaction/transaction-scope.js';
import {
  type ClientHeld,
  endsWithCommit,
  endsLeftOpen,
  heldView,
  placeOfClient,
  refusesCommitFrom,
} from './client-place.js';
import { closesOnTheWire, cursorOf } from './open-streams.js';
import { EndsInFlight, settledWithinIdle } from './ends-in-flight.js';
import { endOf } from '../transaction/submitted-end.js';
import { forwardEvents, listenTextOf, ViewListener } from './view-listener.js';
import { deferredAgain, deferredCheck, NestedCommit } from './nested-commit.js';
import { refusedStatement } from '../transaction/refused-statement.js';
import { commitsAborted } from './aborted-commit.js';
import { nestedTextPartsOf, runInParts } from './one-text-nested.js';
import { isSessionSetup, setupAsLocal } from './connection-setup.js';
import { NoticeRouter, noticesTo } from './notice-router.js';

const logger = new Logger('Idempotency');
/** Pools already warned of (see `otherPool`): once each, not once per request. */
const warnedPools = new WeakSet<object>();

/** A submittable (a cursor, a `pg.Query`): node-postgres tells it how it ends. */
interface Submitted {
  handleReadyForQuery?: (...args: unknown[]) => unknown;
  handleError?: (...args: unknown[]) => unknown;
  /** node-postgres calls it once the connection runs it. */
  submit?: (...args: unknown[]) => unknown;
  /** pg-cursor's: a callback, or a promise when there is none. */
  close?: (...args: unknown[]) => unknown;
}

/**
 * Where a cursor stands between the handler and the connection: `held` until the BEGIN
 * succeeded (see `send`), `queued` once handed to node-postgres, `submitted` once it runs;
 * `withdrawn` when closed while held (never handed over).
 */
type CursorStage = 'held' | 'queued' | 'submitted' | 'withdrawn';

/** A nested transaction of a data layer's, as the savepoint that stands for it. */
interface Savepoint {
  name: string;
  /** The `SAVEPOINT` on its way, once a statement inside it needed it. */
  made?: Promise<unknown>;
  /** A statement not of its nested transaction ran inside it (see `markBeside`). */
  beside?: boolean;
  /** A statement of its own that is not a plain read ran inside it: a read beside may see it. */
  wrote?: boolean;
  /** Its ROLLBACK TO or RELEASE has been sent: nothing sent after runs inside it. */
  endSent?: boolean;
  /**
   * For its data layer's outermost transaction (a transaction of its own without the
   * library): the name its role, session authorization and search path are kept under, put
   * back at its `COMMIT` as its real `COMMIT` would end a `SET LOCAL` (see `keepNestedState`).
   * Named by its depth among the open savepoints: those of one depth are never open at once,
   * so the settings a connection ends up with are bounded by the deepest nesting, not by how
   * many nested transactions it ever ran.
   */
  keptAs?: string;
  /**
   * Its code set the role, session authorization or search path in it (`SET LOCAL ROLE`):
   * a statement beside it, which runs inside it on the request's one connection, would run
   * as that role, where without the library it runs on a connection of its own.
   */
  setIdentity?: boolean;
  /**
   * Its code set a setting for the transaction inside it (`SET LOCAL statement_timeout`,
   * `set_config('app.tenant', …, true)`): a statement beside it would run under it, where
   * without the library it runs on a connection of its own, with its own settings.
   */
  localSettings?: boolean;
  /**
   * Begun `READ ONLY` (Drizzle's `accessMode`, Kysely's `setAccessMode`): its savepoint makes
   * the transaction read only, and PostgreSQL ends that mode with the savepoint.
   */
  readOnly?: boolean;
  /**
   * For its data layer's outermost transaction: what its code left that its own `COMMIT` would
   * have ended (settings set for the transaction, temporary tables `ON COMMIT`, cursors),
   * ended after its `RELEASE` (see `NestedCommit`).
   */
  commit?: NestedCommit;
}

/**
 * A savepoint a data layer made itself inside its transaction (Drizzle's nested
 * `tx.transaction()`, Kysely's `savepoint()`, Prisma's nested `$transaction`), by the view
 * that sent it, at that view's depth of nested transactions.
 */
interface InnerSavepoint {
  name: string;
  view: JoinedClient;
  depth: number;
  /** A statement not of its view ran inside it: rolled back to, it would take it along. */
  beside?: boolean;
  /** A statement of its view that is not a plain read ran inside it (see `Savepoint`). */
  wrote?: boolean;
  /** A setting its view set for the transaction inside it (see `Savepoint`). */
  localSettings?: boolean;
  /** Its view set its role or search path inside it (see `Savepoint`). */
  setIdentity?: boolean;
  /**
   * Whether each nested transaction and savepoint around it had written when it was made: a
   * write inside it marks those too, and rolled back to, it is undone there as well.
   */
  wroteBefore: [Savepoint | InnerSavepoint, boolean][];
}

/**
 * Where a statement of the app's stands among the others called on the request's connection:
 * `after`, the nested transactions' ends called before it, which it is sent behind (see
 * `EndsInFlight`; taken at its call when not given); `onSent`, told once it is handed to
 * node-postgres (see `JoinedClient.release`).
 */
interface CallOrder {
  after?: readonly Promise<unknown>[];
  onSent?: () => void;
  /** A data layer's setup made `SET LOCAL` (see `setupAsLocal`): the request's, not put back. */
  setup?: true;
}

/** Takes `savepoint` off `savepoints`, wherever it stands, if it is there. */
function withdraw(savepoints: Savepoint[], savepoint: Savepoint): void {
  const at = savepoints.lastIndexOf(savepoint);
  if (at >= 0) savepoints.splice(at, 1);
}

/** What ends a nested transaction after its `RELEASE`, if anything, as the statement's tail. */
function ending(text: string | undefined): string {
  return text === undefined ? '' : `; ${text}`;
}

/**
 * The request's transaction on a node-postgres pool that the app's data layer runs on
 * (Prisma with `@prisma/adapter-pg`, Drizzle, Kysely), joined through the pool itself (see
 * `joinTransactionsOfPool`): `pool.query()` in the scope runs in it, and `pool.connect()`
 * gives a view of its connection on which the data layer's own transactions nest: `BEGIN` is a
 * savepoint (made when the first statement inside it needs it, so that a level asked for just
 * after it still sets the request's), `COMMIT` releases it, `ROLLBACK` rolls back to it.
 */
export class PoolTransaction extends RequestTransaction {
  /** The open savepoints of every view, innermost last: nested transactions end in order. */
  private readonly savepoints: Savepoint[] = [];
  /** The data layers' own savepoints inside their nested transactions, innermost last. */
  private inner: InnerSavepoint[] = [];
  /** Nested transactions rolled back whose ROLLBACK TO is not sent yet (see `markBeside`). */
  private readonly rolledBackUnsent = new Set<Savepoint>();
  private savepointCount = 0;
  /** The request's connection, once a savepoint was made on it (see `onRelease`). */
  private savepointClient?: PoolClient;
  /** Cursors handed to the request's connection that have not ended (see `refuseBehindCursor`). */
  private readonly openCursors = new Set<object>();
  /** Where each cursor handed over stands (see `watchCursor`). */
  private readonly cursorStages = new WeakMap<object, CursorStage>();
  /**
   * Texts of a view's nested transaction that set a setting or its role, called and not sent
   * yet: noted on a savepoint only as they are sent (see `noteSent`), they make a statement
   * beside called meanwhile refused as if they had run (see `refuseBesideIdentity`).
   */
  private readonly settingUnsent = new Set<{ view: JoinedClient; identity: boolean }>();
  /** Tells a view the notices of its statements on the request's connection. */
  private readonly notices = new NoticeRouter();
  /** The views that sent anything but SETs: a view's first SETs may be its setup (see `onView`). */
  private readonly viewsUsed = new WeakSet<JoinedClient>();
  /** Nested transactions' ends called and not handed to node-postgres yet. */
  private readonly endsInFlight = new EndsInFlight();

  constructor(
    readonly appPool: Pool,
    timeoutMs: number,
    joinable: boolean,
    namedStatements = true,
  ) {
    super(() => appPool, timeoutMs, joinable, namedStatements);
  }

  override joinedPool(pool: object): PoolJoin | undefined {
    if (!this.joinable || pool !== this.appPool) return undefined;
    // After the answer committed, work the handler left running runs on its own, as it would
    // without the library; while the commit is under way or after a rollback, it is joined
    // so that it waits for the outcome, and is refused if the request rolled back.
    if (this.ended && this.settled && this.committed) return undefined;
    return this.join;
  }

  /** How it stands to a client of `pool` taken in another scope (`placeOfClient`). */
  poolScope(pool: object): 'open' | 'ended' | undefined {
    if (!this.joinable || pool !== this.appPool) return undefined;
    return this.ended ? 'ended' : 'open';
  }

  /**
   * A view of its connection standing in for a view taken in another scope and used in this
   * one (`placeOfClient`'s `join`): the statement is this scope's, as `pool.query()` here is.
   */
  standInOf(pool: object): PoolClient | undefined {
    if (!this.joinable || pool !== this.appPool) return undefined;
    return new JoinedClient(this) as unknown as PoolClient;
  }

  /** A statement of a client not of this scope was refused (`placeOfClient`'s `refuse`). */
  refuseRunner(error: RunnerConnectedOutsideRequestError): void {
    if (!this.ended) this.refuse(error);
  }

  override otherPool(pool: object): void {
    if (!this.joinable || this.ended || pool === this.appPool || warnedPools.has(pool)) return;
    warnedPools.add(pool);
    logger.warn(
      'A statement ran inside an idempotent request on a node-postgres pool (or a client the ' +
        'app connected itself) that is not the one given to IdempotencyModule (its pool ' +
        'option): it commits on its own, not with the ' +
        'stored answer, and a retry runs it again. Build the data layer on the same pool ' +
        '(new PrismaPg(pool), drizzle({ client: pool }), new PostgresDialect({ pool })); for ' +
        'work that is not the request’s, run it in IdempotentTransaction.outside().',
    );
  }

  private readonly join: PoolJoin = {
    query: (args) => this.statement(args, () => false, null),
    connect: () => Promise.resolve(new JoinedClient(this) as unknown as PoolClient),
  };

  /**
   * A cursor the handler left open holds the connection its commit needs: the request can
   * then only roll back (its `ROLLBACK` waits at most `timeoutMs` behind the cursor, then the
   * connection is dropped), and answers `cursor_open`, not a 503 after the commit's deadline.
   */
  protected override refuseLeftOpen(): void {
    if (this.ended) return;
    if (this.openCursors.size > 0) this.refuse(new CursorOpenRefusedError());
    if (this.savepoints.length > 0) this.refuse(new NestedTransactionOpenAtCommitError());
  }

  /**
   * The request's commit is called after the nested transactions' ends its code called before
   * answering without awaiting them (`client.query('COMMIT')` then `return`): node-postgres
   * would run those first, so it waits for them (at most its deadline) before judging what
   * was left open. Its deadline counts only time in which none of its code's statements runs
   * on the connection (`settledWithinIdle`): an end queued behind one of them (`BEGIN`, a
   * slow `INSERT`, `COMMIT`, sent pipelined) waits for it, and that wait is the handler's,
   * bounded as its statements are (`statement_timeout`), as for the library's own statements
   * at the end (`codeStatementsDone`); counted from the commit's call, the end was judged left
   * open behind a statement slower than the deadline, on every try (adversary 82).
   */
  override commitWith(statement: FencedStatement): Promise<boolean> {
    return this.afterEndsInFlight(() => super.commitWith(statement));
  }

  override commitPlain(): Promise<void> {
    return this.afterEndsInFlight(() => super.commitPlain());
  }

  private afterEndsInFlight<T>(commit: () => Promise<T>): Promise<T> {
    const ends = this.endsInFlight.before();
    if (ends.length === 0 || this.ended) return commit();
    return settledWithinIdle(ends, this.timeoutMs, () => this.codeStatementsRunning).then(commit);
  }

  /** TypeORM's manager is not there on a pool: the data layer's own client joins instead. */
  get manager(): EntityManager {
    return managerUnavailable;
  }

  override get readOnlyNow(): boolean {
    return this.savepoints.some((savepoint) => savepoint.readOnly);
  }

  async query<R = Record<string, unknown>>(text: string, values: unknown[]): Promise<R[]> {
    const result =
      (await this.ownStatement(text, values)) ??
      ((await this.statement([text, values], () => false, 'own')) as QueryResult);
    return result.rows as R[];
  }

  /**
   * A statement of the app's: refused if it would end or start the request's transaction; a
   * plain read before the first write runs apart on a connection of its own (as on TypeORM),
   * anything else on the request's connection, inside the open savepoints: those of the view
   * it came from (`from`; null: `pool.query()`; 'own': the library's), else refused (see
   * `besideNested`).
   */
  async statement(
    args: unknown[],
    nested: () => boolean,
    from: JoinedClient | null | 'own',
    beforeSend?: () => void,
    order: CallOrder = {},
  ): Promise<unknown> {
    // Called after another view's `COMMIT` or `ROLLBACK` that is still on its way (not
    // awaited): node-postgres would run it after that end, so it is sent after it, and judged
    // then (not beside, nor inside, a nested transaction its code had ended). The library's own
    // statements come after the handler's work, and are bounded by their deadlines.
    const after = from === 'own' ? [] : (order.after ?? this.endsInFlight.before());
    if (after.length > 0) await Promise.all(after);
    if (this.ended) return this.apart(nested(), () => this.sendAlone(args, true));
    const text = textOf(args[0]);
    const refused = this.refusalOf(text);
    if (refused) throw refused;
    const level = from === null ? this.leadingIsolationOf(text) : undefined;
    if (level) {
      // Sent as it is, it would meet the session's state captured in the BEGIN's round trip
      // (a query: 25001, "must be called before any query"). It is what it is without the
      // library: the level of the transaction the statements after it run in.
      await this.askIsolation(level);
      return emptyResult('SET');
    }
    if (!this.openedByCode && !isAboveReadCommitted(this.plannedLevel()) && isPlainRead(text)) {
      const apart = await this.readApart(args, from === 'own' ? null : from);
      if (apart) return apart.result;
    }
    // Outside any transaction of its own (the pool, or a client of it with none open), as
    // without the library: there it does nothing. With other statements it would last in the
    // request's transaction, which could then not store the answer: refused.
    const outside = from === null || (from !== 'own' && from.savepoints.length === 0);
    if (outside && isTransactionModeOnly(text)) return this.sendAlone(args);
    if (outside && setsReadOnly(text)) throw this.refuse(new ReadOnlyTransactionRefusedError());
    this.refuseBehindCursor();
    // The nested transactions open as it is sent: it runs inside those, not inside one begun
    // while it waits for the connection (that one's SAVEPOINT goes after it).
    const open = from === 'own' ? undefined : this.savepoints.slice();
    if (from !== 'own') this.refuseBesideIdentity(from, text);
    const inside = from && from !== 'own' && from.savepoints.length > 0 ? from : undefined;
    const steps = inside ? statementStepsOf(text, valuesOf(args)) : undefined;
    const unsent = inside && steps ? this.noteUnsent(inside, steps) : undefined;
    // `SET TRANSACTION READ ONLY` inside its nested transaction: as a `BEGIN READ ONLY`, until
    // its savepoint ends (PostgreSQL ends the mode there).
    if (inside && setsReadOnly(text)) {
      inside.savepoints[inside.savepoints.length - 1].readOnly = true;
    }
    // A text of several statements that sets something for its own implicit transaction.
    // Not the setup made the request's transaction's own (see `onView`).
    const oneShot = outside && !order.setup ? oneShotSettingsOf(text, valuesOf(args)) : undefined;
    let client: PoolClient;
    let putBack: string | undefined;
    try {
      client = await this.connection();
      await this.makeSavepoints(client, open);
      if (from && from !== 'own' && from.savepoints[0]?.keptAs) {
        await this.keepSettings(client, from.savepoints[0], text, valuesOf(args));
      }
      if (oneShot) putBack = await this.keepOneShot(client, oneShot);
    } finally {
      // Sent at once from here (nothing awaited before `send`), or never: `noteSent` notes it.
      if (unsent) this.settingUnsent.delete(unsent);
    }
    // What it runs inside is what was sent before it: judged as it is sent (the order the
    // connection runs them in), its data layer's own savepoints too.
    // A nested transaction's own end first (`endSavepoint`): judged on what went before it.
    // Whether it is a plain read: parsed once, and only beside or inside a nested transaction.
    const read =
      from !== 'own' && (this.savepoints.length > 0 || this.rolledBackUnsent.size > 0)
        ? isPlainRead(text)
        : false;
    if (beforeSend) beforeSend();
    else if (from && from !== 'own' && from.savepoints.length > 0) {
      this.noteSent(from, steps ?? statementStepsOf(text, valuesOf(args)), read);
    }
    if (from !== 'own') this.markBeside(from, read);
    try {
      const sent = this.send(client, args, nested);
      // Its notices told on the view that sent it, as its own client's would be (a stream,
      // handed back as it is, is not followed).
      const sending =
        from !== 'own' && isThenable(sent) ? this.notices.during(client, from, sent) : sent;
      // Queued right behind it on the connection, nothing between: what it set ends with it,
      // as its implicit transaction would end it. After a failure it is refused (25P02), as
      // anything is there: the request's transaction is aborted then anyway.
      if (putBack) void this.send(client, [putBack], () => true).catch(() => undefined);
      order.onSent?.();
      const result = await sending;
      this.noteSuccess(text);
      return result;
    } catch (error) {
      // A write refused in a transaction that began read-write (a nested READ ONLY's too) is
      // its code's own mistake: `noteFailure` marks it, by `beganReadOnly`.
      this.noteFailure(error);
      throw error;
    }
  }

  /**
   * Before a text that sets something for its own implicit transaction (see
   * `OneShotSettings`): keeps what it sets (the role and search path under `one_shot`, the
   * settings' values read now); what puts them back after it.
   */
  private async keepOneShot(client: PoolClient, oneShot: OneShotSettings): Promise<string> {
    const putBack: string[] = [];
    if (oneShot.identity) {
      await this.send(client, [keepNestedState('one_shot')], () => true);
      putBack.push(restoreNestedState('one_shot'));
    }
    if (oneShot.names.length > 0) {
      type Rows = QueryResult<{ name: string; value: string | null }>;
      const read = (await this.send(client, [READ_SETTINGS, [oneShot.names]], () => true)) as Rows;
      putBack.push(restoreSettings(new Map(read.rows.map(({ name, value }) => [name, value]))));
    }
    return putBack.join('; ');
  }

  /**
   * A plain read, run apart before the transaction opens, in a read-only transaction of its
   * round trip: whatever it calls that the text does not show (a view's function, a cast's, a
   * domain's check, an aggregate of the app's) cannot write there. One that would (25006) is
   * undefined: it runs in the request's transaction, as a write does. A named read runs apart
   * unnamed (`apartStatement`); one whose arguments cannot be carried so (a callback, a
   * cursor) is undefined too.
   */
  private async readApart(
    args: unknown[],
    from: JoinedClient | null,
  ): Promise<{ result: QueryResult } | undefined> {
    const statement = apartStatement(args);
    if (!statement) return undefined;
    const client = await acquire(this.pool(), this.timeoutMs);
    // What PostgreSQL warns of as it reads is told on the view, as on its own connection.
    const stopNotices = noticesTo(client, from);
    try {
      const result = await readOnly(client, statement).finally(stopNotices);
      client.release();
      return { result };
    } catch (error) {
      if (isReadOnlyError(error)) {
        client.release();
        return undefined;
      }
      client.release(asError(error));
      throw error;
    }
  }

  /**
   * The level of a `SET TRANSACTION ISOLATION LEVEL` sent through `pool.query()` before the
   * transaction began (Drizzle's `db.execute`, Prisma's `$executeRaw`): taken as the level to
   * begin at, as the same statement on a view of the connection is (see `onView`). Once begun,
   * undefined: it is sent as it is, and PostgreSQL decides.
   */
  private leadingIsolationOf(text: unknown): string | undefined {
    // Begun by its code (a claim it began with, `oneCommit`, does not count: see `askIsolation`).
    if (this.codeBegan) return undefined;
    const control = nestedControlOf(text);
    return control?.kind === 'set-isolation' ? control.level : undefined;
  }

  /**
   * A statement of `view` (null: `pool.query()`) runs inside every open nested transaction,
   * its own or not: on the request's one connection there is no other place. Those that are
   * not its own are marked: if one of them rolls back, it takes that statement along, while
   * without the library the statement would have committed on a connection of its own (`db`
   * instead of `trx` inside a transaction's callback, or work running beside it). That
   * rollback is then refused (see `rollBack`); a commit keeps both, as the app meant.
   */
  private markBeside(view: JoinedClient | null, read = false): void {
    if (
      this.savepoints.length === 0 &&
      this.inner.length === 0 &&
      this.rolledBackUnsent.size === 0
    ) {
      return;
    }
    // A plain read loses nothing rolled back, but may have seen what the nested transaction
    // wrote before it (which without the library it would not): marked only beside those.
    // Those whose SAVEPOINT was sent and whose end was not: one begun while the statement
    // waited is made after it, one rolled back before it was sent no longer holds it.
    for (const savepoint of [...this.savepoints, ...this.rolledBackUnsent]) {
      if (!savepoint.made || savepoint.endSent || view?.savepoints.includes(savepoint)) continue;
      if (!read || savepoint.wrote) savepoint.beside = true;
    }
    for (const savepoint of this.inner) {
      if (savepoint.view !== view && (!read || savepoint.wrote)) savepoint.beside = true;
    }
  }

  /**
   * A text of `view` inside its nested transactions that sets its role or a setting, from its
   * call until it is sent: a statement beside called meanwhile may run after it, under what it
   * sets (see `settingUnsent`). Undefined when it sets nothing.
   */
  private noteUnsent(
    view: JoinedClient,
    steps: readonly StatementStep[],
  ): { view: JoinedClient; identity: boolean } | undefined {
    if (!steps.some((step) => step.identity || step.settings)) return undefined;
    const unsent = { view, identity: steps.some((step) => step.identity) };
    this.settingUnsent.add(unsent);
    return unsent;
  }

  /** The last of `view`'s own savepoints at its depth of nested transactions, if any. */
  private innermostInner(view: JoinedClient): InnerSavepoint | undefined {
    const depth = view.savepoints.length;
    for (let at = this.inner.length - 1; at >= 0; at--) {
      const savepoint = this.inner[at];
      if (savepoint.view === view && savepoint.depth === depth) return savepoint;
    }
    return undefined;
  }

  /**
   * A statement of `view` inside its nested transactions, as it is sent: what it wrote there,
   * what it set there that a statement beside them would meet (its role or search path, a
   * setting for the transaction), and its data layer's own savepoints (see `InnerSavepoint`):
   * rolled back to one that holds a statement sent beside it, the request is refused, as for
   * its nested transaction's rollback; released, what was in it is in the one around it.
   */
  private noteSent(view: JoinedClient, steps: readonly StatementStep[], read: boolean): void {
    // Each statement of the text in its order (`SAVEPOINT a; SELECT set_config(…, true)`, a
    // comment first): a setting on the savepoint innermost where it runs, which a savepoint
    // statement before it in the text has made, rolled back to or released. Rolled back to,
    // what was set ends with it; released, it passes to the one around it (see
    // `noteSavepointControl`, `endSavepoint`).
    for (const step of steps) {
      if (step.control) {
        this.noteSavepointControl(view, step.control);
        continue;
      }
      const innermost = this.innermostInner(view) ?? view.savepoints[view.savepoints.length - 1];
      if (step.identity) innermost.setIdentity = true;
      if (step.settings) innermost.localSettings = true;
      if (!read) this.noteWrite(view);
    }
  }

  /** A statement of `view` that is not a plain read: its open nested transactions wrote. */
  private noteWrite(view: JoinedClient): void {
    for (const savepoint of view.savepoints) savepoint.wrote = true;
    const depth = view.savepoints.length;
    for (const savepoint of this.inner) {
      if (savepoint.view === view && savepoint.depth === depth) savepoint.wrote = true;
    }
  }

  /** A data layer's own `SAVEPOINT`, `RELEASE` or `ROLLBACK TO`, sent by `view`. */
  private noteSavepointControl(view: JoinedClient, control: SavepointControl): void {
    const depth = view.savepoints.length;
    let at = this.inner.length - 1;
    while (at >= 0) {
      const savepoint = this.inner[at];
      if (savepoint.view === view && savepoint.name === control.name && savepoint.depth === depth) {
        break;
      }
      at -= 1;
    }
    if (control.kind === 'savepoint') {
      const around = [
        ...view.savepoints,
        ...this.inner.filter((savepoint) => savepoint.view === view && savepoint.depth === depth),
      ];
      const wroteBefore = around.map((savepoint): [Savepoint | InnerSavepoint, boolean] => [
        savepoint,
        savepoint.wrote === true,
      ]);
      this.inner.push({ name: control.name, view, depth, wroteBefore });
    } else if (at >= 0 && control.kind === 'release') {
      const released = this.inner.splice(at);
      const around = this.innermostInner(view) ?? view.savepoints[view.savepoints.length - 1];
      if (released.some((savepoint) => savepoint.localSettings) && around) {
        around.localSettings = true;
      }
      if (released.some((savepoint) => savepoint.setIdentity) && around) around.setIdentity = true;
      if (released.some((savepoint) => savepoint.beside) && around) around.beside = true;
      if (released.some((savepoint) => savepoint.wrote) && around) around.wrote = true;
    } else if (at >= 0) {
      if (this.inner.slice(at).some((savepoint) => savepoint.beside)) {
        this.refuse(new StatementBesideNestedTransactionError());
      }
      // Rolled back to: what was set and written in it ended; the savepoint stays.
      this.inner.splice(at + 1);
      const kept = this.inner[at];
      kept.localSettings = false;
      kept.setIdentity = false;
      kept.beside = false;
      kept.wrote = false;
      // What it wrote is undone around it too: those wrote only what they had before it.
      for (const [around, wrote] of kept.wroteBefore) around.wrote = wrote;
    }
  }

  /** The data layer's own savepoints inside `view`'s nested transactions that have ended. */
  private endInner(view: JoinedClient): void {
    const depth = view.savepoints.length;
    this.inner = this.inner.filter(
      (savepoint) => savepoint.view !== view || savepoint.depth <= depth,
    );
  }

  /**
   * A statement beside a nested transaction that set its role (or search path) would run
   * inside it, as that role: refused, the request with it, rather than run as another role in
   * silence (row-level security would hide rows from it).
   */
  private refuseBesideIdentity(view: JoinedClient | null, text: unknown): void {
    // One whose end is sent is over for what is sent from now (it runs after that end).
    const beside = this.savepoints.filter(
      (savepoint) => !savepoint.endSent && !view?.savepoints.includes(savepoint),
    );
    const unsent = [...this.settingUnsent].filter((text) => text.view !== view);
    if (beside.some((savepoint) => savepoint.setIdentity) || unsent.some((text) => text.identity)) {
      throw this.refuse(new StatementBesideNestedTransactionError(true));
    }
    // Likewise a write beside one begun READ ONLY: it would be refused there (25006). A read
    // runs there as it would apart.
    if (beside.some((savepoint) => savepoint.readOnly) && !isPlainRead(text)) {
      throw this.refuse(new StatementBesideNestedTransactionError('read-only'));
    }
    // Or beside one that set a setting for itself: it would run under its statement_timeout,
    // as its tenant (`set_config('app.tenant', …, true)`, row-level security's).
    if (this.inner.some((savepoint) => savepoint.view !== view && savepoint.setIdentity)) {
      throw this.refuse(new StatementBesideNestedTransactionError(true));
    }
    if (
      beside.some((savepoint) => savepoint.localSettings) ||
      this.inner.some((savepoint) => savepoint.view !== view && savepoint.localSettings) ||
      unsent.length > 0
    ) {
      throw this.refuse(new StatementBesideNestedTransactionError('settings'));
    }
  }

  /** A nested transaction rolls back: refused (the request with it) if it holds another's. */
  private rollBack(savepoint: Savepoint): void {
    if (savepoint.beside) this.refuse(new StatementBesideNestedTransactionError());
  }

  /**
   * A cursor (Kysely's `stream()`): handed back at once, submitted once the connection is.
   * Called after a nested transaction's `COMMIT` or `ROLLBACK` still on its way (`after`, taken
   * at its call), it is held until that end is handed over, as a statement is (see
   * `statement`), and judged then: not open ahead of the end its code called first. Closed
   * meanwhile, it is withdrawn.
   */
  submit(
    args: unknown[],
    nested: () => boolean,
    view: JoinedClient,
    after: readonly Promise<unknown>[] = [],
  ): unknown {
    const submittable = args[0] as Submitted;
    if (after.length === 0 || this.ended) return this.submitNow(args, nested, view);
    this.watchCursor(submittable, false);
    void Promise.all(after).then(() => {
      if (this.cursorStages.get(submittable) === 'withdrawn') return;
      this.submitNow(args, nested, view, true);
    });
    return submittable;
  }

  private submitNow(
    args: unknown[],
    nested: () => boolean,
    view: JoinedClient,
    watched = false,
  ): unknown {
    const submittable = args[0] as Submitted;
    if (this.ended) {
      queueMicrotask(() => submittable.handleError?.(new TransactionEndedError(nested())));
      return submittable;
    }
    try {
      this.refuseBehindCursor();
      // As a statement's: beside a nested transaction that set its role or a setting.
      this.refuseBesideIdentity(view, textOf(args[0]));
    } catch (error) {
      queueMicrotask(() => submittable.handleError?.(error));
      return submittable;
    }
    if (!watched) this.watchCursor(submittable);
    else if (cursorOf(submittable)) this.openCursors.add(submittable);
    const open = this.savepoints.slice();
    const text = textOf(args[0]);
    // Inside its own nested transactions, as a statement's: what it sets, what it writes.
    const steps = statementStepsOf(text, valuesOf(args));
    const unsent = view.savepoints.length > 0 ? this.noteUnsent(view, steps) : undefined;
    const sent = () => {
      if (unsent) this.settingUnsent.delete(unsent);
    };
    // A cursor's failure (raised while it is read) aborts the transaction as a statement's does.
    const handleError = submittable.handleError?.bind(submittable);
    if (handleError) {
      submittable.handleError = (error: unknown) => {
        this.noteFailure(error);
        handleError(error);
      };
    }
    void this.connection()
      .then(async (client) => {
        await this.makeSavepoints(client, open).finally(sent);
        const read = isPlainRead(text);
        if (view.savepoints.length > 0) this.noteSent(view, steps, read);
        this.markBeside(view, read);
        return this.send(client, args, nested);
      })
      .catch((error: unknown) => {
        sent();
        submittable.handleError?.(error);
      });
    return submittable;
  }

  /**
   * A statement sent while a cursor is open on the request's connection would queue behind it
   * (node-postgres runs one at a time), and the code that reads the cursor most often awaits
   * that statement first (a write per streamed row): a hang, with the key held. Refused at
   * once, and the request with it: there is no other connection to run it on, since its
   * writes must commit with the answer. Without a cursor open, nothing to do.
   */
  private refuseBehindCursor(): void {
    if (this.openCursors.size > 0) throw this.refuse(new CursorOpenRefusedError());
  }

  /**
   * Counts `cursor` as open (`open`: from now) until node-postgres says it ended (or failed),
   * or until it is closed before it was handed over (see `endOnClose`). Only one that stops
   * mid-way until its code reads on (`cursorOf`: a pg-cursor, a pg-query-stream): anything
   * else (a `pg.Query`) runs to its end by itself, and a statement queued behind it waits for
   * nothing of its code's.
   */
  private watchCursor(cursor: Submitted, open = true): void {
    if (open && cursorOf(cursor)) this.openCursors.add(cursor);
    this.cursorStages.set(cursor, 'held');
    for (const method of ['handleReadyForQuery', 'handleError'] as const) {
      const own = cursor[method];
      if (typeof own !== 'function') continue;
      cursor[method] = (...args: unknown[]) => {
        this.openCursors.delete(cursor);
        // Closed before it ran: the handler is done with it, and an error event nobody
        // listens for would throw.
        if (this.cursorStages.get(cursor) === 'withdrawn') return undefined;
        return own.apply(cursor, args);
      };
    }
    this.endOnClose(cursor);
  }

  /**
   * Ends `submittable` when its code closes its cursor (`cursorOf`: a pg-cursor itself, the
   * one a pg-query-stream wraps, closed by its `destroy()` or by `break` out of its `for
   * await`). Running, its portal's Close and a Sync are sent at once: its ReadyForQuery comes
   * a round trip later, but a statement sent meanwhile waits for nothing of its code's, since
   * node-postgres queues it behind the close (adversary 75, as `OpenStreams` on TypeORM's
   * path). The handler holds it at once, but it is submitted only once the BEGIN succeeded:
   * pg-cursor's `close()` before that finds no connection and does nothing, and the cursor
   * would open afterwards and hold the connection. Closed while held, it is withdrawn (never
   * submitted: see `withdrawn`); closed once handed to node-postgres but not yet run, its
   * close waits until it runs, so that it ends as soon as it opens.
   */
  private endOnClose(submittable: Submitted): void {
    const cursor = cursorOf(submittable);
    const close = cursor?.close;
    if (!cursor || typeof close !== 'function') return;
    const submit = submittable.submit;
    let closeOnSubmit: (() => void) | undefined;
    if (typeof submit === 'function') {
      submittable.submit = (...args: unknown[]) => {
        this.cursorStages.set(submittable, 'submitted');
        const result = submit.apply(submittable, args);
        closeOnSubmit?.();
        return result;
      };
    }
    cursor.close = (...args: unknown[]) => {
      const stage = this.cursorStages.get(submittable);
      if (stage === 'held') {
        this.cursorStages.set(submittable, 'withdrawn');
        this.openCursors.delete(submittable);
      } else if (closesOnTheWire(cursor)) this.openCursors.delete(submittable);
      if (stage !== 'queued' || typeof submit !== 'function') return close.apply(cursor, args);
      const callback = typeof args[0] === 'function' ? args[0] : undefined;
      const closed = new Promise<void>((resolve, reject) => {
        closeOnSubmit = () => {
          // Running now: its Close and Sync go at once (see above).
          this.openCursors.delete(submittable);
          void (close.call(cursor, (error?: unknown) =>
            error ? reject(asError(error)) : resolve(),
          ) as unknown);
        };
      });
      if (!callback) return closed;
      closed.then(
        () => (callback as (error?: unknown) => void)(),
        (error: unknown) => (callback as (error?: unknown) => void)(error),
      );
      return undefined;
    };
  }

  protected override withdrawn(submittable: object): boolean {
    if (this.cursorStages.get(submittable) === 'withdrawn') return true;
    if (this.cursorStages.has(submittable)) this.cursorStages.set(submittable, 'queued');
    return false;
  }

  /**
   * A connection of its own for a view that outlives the request (work the handler left
   * running, an event listener that opens a transaction as the request commits): once the end
   * has an outcome, if it committed, as that work would have had without the library; refused
   * if it rolled back.
   */
  connectionApart(): Promise<PoolClient> {
    return this.afterEnd(() => acquire(this.appPool, 'as-the-pool'));
  }

  /**
   * A connection of the pool for a view's own use now (a `LISTEN`: see `ViewListener`), waited
   * for at most the request's deadline: the request may hold a connection of the same pool,
   * and on a pool whose every connection is so held the wait would have no end, the key held
   * by its heartbeat (as `IdempotentTransaction.outside()`'s waits are bounded: OutsideScope).
   */
  connectionOfItsOwn(): Promise<PoolClient> {
    return acquire(this.appPool, this.timeoutMs);
  }

  /** A view's `COMMIT` or `ROLLBACK` called now, handed over once `handed` settles. */
  endCalled(handed: Promise<unknown>): void {
    this.endsInFlight.add(handed);
  }

  /** The nested transactions' ends called before now (see `EndsInFlight`). */
  endsBefore(): readonly Promise<unknown>[] {
    return this.endsInFlight.before();
  }

  /** What a view does with a statement: its nested transaction's control, or the statement. */
  async onView(view: JoinedClient, args: unknown[], order: CallOrder = {}): Promise<unknown> {
    const control = nestedControlOf(textOf(args[0]));
    const nested = () => view.depth > 0;
    const fresh = !this.viewsUsed.has(view) && view.depth === 0 && args.length <= 2;
    // A data layer's setup of a connection new to it (see `setupAsLocal`), of one statement or
    // several, in one text or one per query: the view stays fresh while its texts are SETs.
    if (!fresh || !isSessionSetup(args[0], args[1])) this.viewsUsed.add(view);
    const setup = fresh && setupAsLocal(args[0], args[1]);
    if (setup) {
      const own = { ...order, setup: true as const };
      return this.statement([setup, ...args.slice(1)], nested, view, undefined, own);
    }
    if (!control) {
      // `BEGIN; SET LOCAL …` in one text: its own nested transaction's, as on a connection of
      // its own, not a BEGIN of the request's (see `nestedTextPartsOf`).
      const parts = typeof args[0] === 'string' ? nestedTextPartsOf(args[0], args[1]) : undefined;
      if (!parts || args.length > 2) return this.statement(args, nested, view, undefined, order);
      // The parts after the first are sent behind it, not behind the ends called since.
      const orderOf = (first: boolean) => (first ? order : { after: [] });
      return runInParts(
        parts,
        (text, first) => this.onView(view, [text], orderOf(first)),
        (text, first) => this.statement([text], nested, view, undefined, orderOf(first)),
      );
    }
    if (this.ended) return this.apart(true, () => Promise.reject(new TransactionEndedError()));
    switch (control.kind) {
      case 'begin': {
        // Called after another view's `COMMIT` or `ROLLBACK` still on its way: its savepoint is
        // made after that end, so it is on the books after it too (else that end, no longer the
        // innermost, would find another on top of it), as a statement is (see `statement`).
        if (order.after && order.after.length > 0) {
          await Promise.all(order.after);
          if (this.ended)
            return this.apart(true, () => Promise.reject(new TransactionEndedError()));
        }
        await this.askIsolation(control.level);
        const savepoint = {
          name: `idempotency_nested_${++this.savepointCount}`,
          keptAs: view.savepoints.length === 0 ? `nested_${this.savepoints.length + 1}` : undefined,
          readOnly: control.readOnly,
        };
        this.savepoints.push(savepoint);
        view.savepoints.push(savepoint);
        return emptyResult('BEGIN');
      }
      case 'set-isolation':
        await this.askIsolation(control.level);
        return emptyResult('SET');
      case 'commit':
      case 'rollback': {
        // None open on this view: as on a connection of its own outside a transaction block,
        // PostgreSQL only warns (25P01, "there is no transaction in progress"); nothing ends.
        if (view.depth === 0) return emptyResult(control.kind.toUpperCase());
        const savepoint = this.innermost(view, control.kind.toUpperCase());
        try {
          await this.endSavepoint(view, savepoint, control.kind, order);
        } catch (error) {
          if (!commitsAborted(control.kind, error, this.ended)) throw error;
          // PostgreSQL completes the COMMIT of an aborted transaction as a ROLLBACK, with that
          // tag (Kysely's `AbortedTransactionError`, Drizzle's resolved transaction): so does
          // a nested one whose failure inside it no ROLLBACK TO cleared. Sent behind its own
          // failed RELEASE, not behind the ends called since (which wait for this one).
          await this.endSavepoint(view, savepoint, 'rollback', { after: [] });
          return emptyResult('ROLLBACK');
        }
        return emptyResult(control.kind.toUpperCase());
      }
    }
  }

  /**
   * A view given back with its nested transactions open: they roll back. Never throws. Called
   * once the view's calls before the release are handed to node-postgres, its `BEGIN`,
   * `COMMIT` and `ROLLBACK` done (see `JoinedClient.release`). The
   * `ROLLBACK TO SAVEPOINT` is handed to the connection at once, behind what is already on its
   * way and ahead of anything the handler sends after: sent later, it would roll back the
   * statements sent in between too, which are the request's own, and the request would commit
   * its answer without them (one sent beside while the view's calls were still running is
   * inside the nested transaction, and its rollback is refused: see `rollBack`).
   */
  onRelease(view: JoinedClient): void {
    while (view.depth > 0) {
      const savepoint = view.savepoints[view.savepoints.length - 1];
      if (this.savepoints[this.savepoints.length - 1] !== savepoint) {
        // Another nested transaction, begun after it, is still open: ending this one would end
        // that one too. The request can then only roll back.
        this.refuse('a nested transaction given back while one begun after it is open');
        return;
      }
      this.savepoints.pop();
      view.savepoints.pop();
      this.endInner(view);
      this.rollBack(savepoint);
      // Nothing ran inside it, or the request has ended (its savepoint ended with it).
      if (!savepoint.made || this.ended || !this.savepointClient) continue;
      const text = `ROLLBACK TO SAVEPOINT ${savepoint.name}; RELEASE SAVEPOINT ${savepoint.name}`;
      // A failure aborts the request's transaction, whose commit then fails: never silent.
      this.savepointClient.query(text).catch((error: unknown) => {
        this.noteFailure(error);
      });
    }
  }

  /** The view's innermost savepoint, which must be the innermost of all: else refused. */
  private innermost(view: JoinedClient, statement: string): Savepoint {
    const savepoint = view.savepoints[view.savepoints.length - 1];
    if (!savepoint) throw this.refuse(statement);
    if (this.savepoints[this.savepoints.length - 1] !== savepoint) {
      throw this.refuse(
        `${statement} of a nested transaction while another, begun after it on another ` +
          'connection of the pool, is still open',
      );
    }
    return savepoint;
  }

  /**
   * Ends a nested transaction's savepoint. A `COMMIT` that fails (a lost connection, an
   * aborted transaction) leaves the savepoint open: the data layer then sends `ROLLBACK`, as
   * Drizzle, Kysely and Prisma do after a failed commit, and that must find it rather than be
   * refused (which would hide the real failure). A rollback ends it whatever happens.
   */
  private async endSavepoint(
    view: JoinedClient,
    savepoint: Savepoint,
    how: 'commit' | 'rollback',
    order: CallOrder = {},
  ): Promise<void> {
    // Wherever it stands by then: a nested transaction begun on another view while its end
    // was on its way is on top of it in the books, but outside it on the connection.
    const pop = () => {
      withdraw(this.savepoints, savepoint);
      withdraw(view.savepoints, savepoint);
      this.endInner(view);
    };
    if (!savepoint.made) return pop(); // nothing ran inside it
    if (how === 'rollback') {
      // Ended for what is sent from now; a statement sent before its ROLLBACK TO is inside
      // it, whenever it was called: judged as that is sent (below).
      pop();
      this.rolledBackUnsent.add(savepoint);
    }
    const failed = await savepoint.made.then(
      () => undefined,
      (error: unknown) => ({ error }),
    );
    if (failed) {
      // Its SAVEPOINT never took: there is nothing to end, and the request cannot commit.
      this.rolledBackUnsent.delete(savepoint);
      pop();
      if (how === 'commit') throw failed.error;
      return;
    }
    // A rollback puts a SET LOCAL back by itself; a release keeps it, so the outermost's
    // release puts back what its SAVEPOINT kept.
    // Not in a read-only one: what was deferred before it (a foreign key's check locks rows
    // FOR KEY SHARE) would be refused there (25006); the request's COMMIT runs it.
    // Begun beside another of its data layer's transactions that is still open (a
    // `db.transaction` on `db` inside another's callback), it is a savepoint inside that one
    // on the request's one connection: what its COMMIT ends must be its own only. The deferred
    // checks would run the other's too (its lines before their order: 23503), and every
    // cursor would close the other's; so its deferred work is left to the request's COMMIT,
    // and only the cursors it declared are closed.
    const inside = this.savepoints.some((other) => other !== savepoint && other.keptAs);
    const check =
      savepoint.keptAs && !savepoint.readOnly && !inside ? deferredCheck(true) : undefined;
    const text =
      how === 'commit'
        ? (check ? `${check}; ` : '') +
          `RELEASE SAVEPOINT ${savepoint.name}` +
          (savepoint.keptAs
            ? `; ${restoreNestedState(savepoint.keptAs)}` +
              (check && deferredAgain() ? `; ${deferredAgain()}` : '') +
              ending(
                (savepoint.commit ?? new NestedCommit()).endingText(
                  true,
                  inside ? savepoint.keptAs : undefined,
                ),
              )
            : '')
        : `ROLLBACK TO SAVEPOINT ${savepoint.name}; RELEASE SAVEPOINT ${savepoint.name}`;
    try {
      await this.statement(
        [text],
        () => true,
        view,
        () => {
          savepoint.endSent = true;
          if (how !== 'rollback') return;
          this.rolledBackUnsent.delete(savepoint);
          this.rollBack(savepoint);
        },
        order,
      );
    } catch (error) {
      // A COMMIT that failed left it open (see above): what is sent next is inside it again.
      if (how === 'commit') savepoint.endSent = false;
      throw error;
    }
    if (how === 'commit') {
      pop();
      // Released, what it set lasts in the one around it (the outermost's release puts it back).
      const around = view.savepoints[view.savepoints.length - 1];
      if (savepoint.localSettings && around) around.localSettings = true;
      if (savepoint.setIdentity && around) around.setIdentity = true;
    }
    // Rolled back to its savepoint: a failure inside it no longer aborts the transaction, and
    // a later "transaction is aborted" is another failure's, not that one's.
    else this.lastError = undefined;
  }

  /**
   * Before a statement of a data layer's nested transaction: what it leaves that the
   * outermost one's `COMMIT` would end, noted on that savepoint (see `NestedCommit`).
   */
  private async keepSettings(
    client: PoolClient,
    outermost: Savepoint,
    text: unknown,
    values: readonly unknown[] | undefined,
  ) {
    outermost.commit ??= new NestedCommit();
    await outermost.commit.before(text, values, (names) => this.readSettings(client, text, names));
  }

  /**
   * The values of the settings `names` before `text` (see `keepSettings`). After a caught
   * failure the transaction is aborted (25P02) until a `ROLLBACK TO`: a text that begins with
   * one (`ROLLBACK TO SAVEPOINT s; SELECT set_config('app.tenant', …, true)`, the recovery
   * in one round trip, as it runs without the library) has them read after it. Any other
   * text is sent unread: it fails at its first statement (its own 25P02), having set nothing.
   */
  private async readSettings(
    client: PoolClient,
    text: unknown,
    names: string[],
  ): Promise<readonly { name: string; value: string | null }[]> {
    type Rows = QueryResult<{ name: string; value: string | null }>;
    try {
      return ((await this.send(client, [READ_SETTINGS, [names]], () => true)) as Rows).rows;
    } catch (error) {
      if (!isTransactionAbortedError(error)) throw error;
      const first = savepointControlsOf(text)?.[0];
      if (first?.kind !== 'rollback-to') return [];
      const read = readSettingsAfterRollbackTo(first.name, names);
      const results = (await this.send(client, [read], () => true)) as Rows[];
      return results[results.length - 1].rows;
    }
  }

  /**
   * Makes the savepoints no statement has needed yet, outermost first: those of `open` (the
   * ones open when the statement was sent) when given.
   */
  private async makeSavepoints(client: PoolClient, open?: Savepoint[]): Promise<void> {
    if (this.savepoints.length > 0) this.savepointClient = client;
    for (const savepoint of this.savepoints) {
      if (open && !open.includes(savepoint)) break;
      const text =
        (savepoint.keptAs
          ? `SAVEPOINT ${savepoint.name}; ${keepNestedState(savepoint.keptAs)}`
          : `SAVEPOINT ${savepoint.name}`) +
        (savepoint.readOnly ? '; SET TRANSACTION READ ONLY' : '');
      savepoint.made ??= this.send(client, [text], () => true).catch((error: unknown) => {
        this.noteFailure(error);
        throw error;
      });
      await savepoint.made;
    }
  }
}

/**
 * A connection of the pool, as a data layer inside the request's scope gets it: a view of the
 * request's connection. Its `release()` gives nothing back to the pool (the connection is the
 * request's until it commits); its nested transactions roll back if it is given back with
 * them open.
 */
export class JoinedClient extends EventEmitter {
  readonly savepoints: Savepoint[] = [];
  /**
   * Its calls, one after another in the order made: node-postgres runs a client's queries in
   * call order, so code may queue them without awaiting (`Promise.all([client.query('BEGIN'),
   * client.query('INSERT …')])`). Each is judged once the one before it is done, so that the
   * `INSERT` is inside the nested transaction its `BEGIN` opened, and a `ROLLBACK` after it
   * finds it there.
   */
  private turn: Promise<unknown> = Promise.resolve();
  /** Its calls not done yet. */
  private pending = 0;
  /**
   * What `release()` waits for: its last call handed to node-postgres (a statement), or done
   * (a `BEGIN`, `COMMIT` or `ROLLBACK`, whose nested transaction is on the books until then).
   */
  private releasable: Promise<unknown> = Promise.resolve();
  /**
   * Given back (`release()`): what is called on it after is refused, as node-postgres' client
   * ended by `release(true)` refuses it, and as it must be here: run on the request's
   * connection, work its code gave up on would commit with the answer; past the request's
   * end, it would hold a connection apart (see `connectionApart`) that nothing gives back.
   */
  private released = false;
  /** Given back to be destroyed (`release(true)`, or with an error; see `query`). */
  private destroyed = false;

  /** `call` is the view's last: the next waits for it to be done. */
  private inTurn(call: Promise<unknown>): void {
    this.pending += 1;
    this.turn = call.then(
      () => (this.pending -= 1),
      () => (this.pending -= 1),
    );
  }

  constructor(private readonly transaction: PoolTransaction) {
    super();
  }

  /**
   * Its connection of its own, once it was used past the request's end with no nested
   * transaction of its open (see `connectionApart`): from then on it is a client of the pool
   * like any, and its own transactions are real ones. A statement alone would run apart
   * anyway; a `BEGIN` could not (its transaction would straddle connections).
   */
  private apart?: Promise<PoolClient>;

  get depth(): number {
    return this.savepoints.length;
  }

  /**
   * The views of other scopes' connections standing in for it where it was used (a client kept
   * from another request or phase: see `placeOfClient`), each with the stop of its events'
   * forwarding to it; given back with it.
   */
  private readonly standIns = new Map<JoinableTransaction, { view: JoinedClient; stop(): void }>();

  /**
   * Where a statement sent now goes when the scope it is sent from is not the view's own
   * (`placeOfClient`): undefined, as always; a stand-in, that scope's view; or the refusal.
   * `LISTEN` and `UNLISTEN` stay on the view's own listener: they commit nothing.
   */
  private placed(args: unknown[]): JoinedClient | Error | undefined {
    const scope = transactionScope.getStore();
    if (scope === this.transaction || (scope && scope.leftFrom?.(this.transaction)))
      return undefined;
    // Outside every scope only a view's own transaction's COMMIT is judged (below).
    if (!scope && (this.depth === 0 || this.apart)) return undefined;
    if (!isSubmittable(args[0]) && listenTextOf(textOf(args[0])) !== undefined) return undefined;
    const held: ClientHeld = heldView(this.apart !== undefined, this.depth, this.transaction.ended);
    const pool = this.transaction.appPool;
    const stands = scope ? (scope.poolScope?.(pool) ?? 'elsewhere') : 'none';
    if (
      refusesCommitFrom(held, stands) &&
      !isSubmittable(args[0]) &&
      endsWithCommit(textOf(args[0]))
    ) {
      const error = new KeptClientCommittedElsewhereError();
      scope?.refuseRunner?.(error);
      return error;
    }
    if (!scope) return undefined;
    switch (placeOfClient(held, stands)) {
      case 'own':
        return undefined;
      case 'refuse': {
        const error =
          held === 'view-left-open'
            ? new KeptClientTransactionGoneError()
            : new ClientTakenElsewhereError();
        scope.refuseRunner?.(error);
        return error;
      }
      case 'join':
        return this.standInFor(scope, pool);
    }
  }

  /** A `ROLLBACK` of the transaction its code left open when its scope ended (`endsLeftOpen`). */
  private endsLeftOpen(args: unknown[]): boolean {
    if (this.depth === 0 || isSubmittable(args[0])) return false;
    const held = heldView(this.apart !== undefined, this.depth, this.transaction.ended);
    return endsLeftOpen(held, nestedControlOf(textOf(args[0]))?.kind);
  }

  /** Its stand-in in `scope` (one per scope), made at its first use there. */
  private standInFor(scope: JoinableTransaction, pool: object): JoinedClient | undefined {
    const known = this.standIns.get(scope)?.view;
    if (known) return known;
    // Those of scopes that ended, with nothing under way, are of no more use: given back (a
    // connection apart it took past that scope's end goes back to the pool), so that a client
    // kept for the app's life holds no more than the stand-ins of scopes still open.
    for (const [other, { view, stop }] of this.standIns) {
      if (other.poolScope?.(pool) !== 'open' && view.quiet) {
        stop();
        view.release();
        this.standIns.delete(other);
      }
    }
    const view = scope.standInOf?.(pool) as JoinedClient | undefined;
    if (!view) return undefined;
    this.standIns.set(scope, { view, stop: forwardEvents(view, this) });
    return view;
  }

  /** Nothing under way on it: no nested transaction, call or listener. */
  private get quiet(): boolean {
    return this.depth === 0 && this.pending === 0 && !this.listener;
  }

  query(...args: unknown[]): unknown {
    // Work of a try retried since, on a view it took before (see `refuseRetriedTry`).
    const refused = retriedTryRefusal();
    if (refused) return refusedStatement(args, refused);
    if (this.released) return refusedStatement(args, new ReleasedClientError());
    // Its code's transaction, gone with the scope that took it: a ROLLBACK ends it here.
    if (this.endsLeftOpen(args)) {
      this.savepoints.length = 0;
      return this.answered(args, () => Promise.resolve(emptyResult('ROLLBACK')));
    }
    // Kept from another scope (a request's, a phase's) and used in this one.
    const placed = this.placed(args);
    if (placed instanceof Error) return refusedStatement(args, placed);
    if (placed) return placed.query(...args);
    if (!this.apart && this.depth === 0 && this.transaction.ended) {
      this.apart = this.transaction.connectionApart();
      // Refused (the request rolled back): said to each statement, as below.
      this.apart.catch(() => undefined);
      // What that connection hears is the view's, as its own client's would be.
      this.apart
        .then((client) => (this.stopForwarding = forwardEvents(client, this)))
        .catch(() => undefined);
    }
    if (this.apart) return this.queryApart(args);
    const listen = isSubmittable(args[0]) ? undefined : listenTextOf(textOf(args[0]));
    if (listen === 'mixed') return refusedStatement(args, new ListenAmongStatementsRefusedError());
    if (listen === 'listen') {
      this.listener ??= new ViewListener(() => this.transaction.connectionOfItsOwn(), this);
      const listener = this.listener;
      return this.answered(args, (statement) => listener.query(statement));
    }
    if (isSubmittable(args[0])) {
      // Held behind the ends called before it, as a statement is (see `PoolTransaction.submit`).
      const after = this.transaction.endsBefore();
      const submit = () => this.transaction.submit(args, () => this.depth > 0, this, after);
      // One that is not a cursor (a `pg.Query`) runs to its end by itself, and node-postgres
      // runs what is queued behind it on the client after it: so does the next call here.
      const ended = cursorOf(args[0] as object) ? undefined : endOf(args[0] as object);
      // Handed over at once when nothing is before it (watched from the call on), else once
      // the calls before it are done; a statement after it is judged behind it (refused
      // while a cursor is open).
      if (this.pending === 0) {
        const submitted = submit();
        if (ended) this.inTurn(ended);
        return submitted;
      }
      this.inTurn(
        this.turn.then(() => {
          submit();
          return ended;
        }),
      );
      this.releasable = this.turn;
      return args[0];
    }
    const last = args[args.length - 1];
    const callback = typeof last === 'function' ? (last as (...r: unknown[]) => void) : undefined;
    const control = nestedControlOf(textOf(args[0]));
    // The ends called before it, on other views or this one: it is sent behind them.
    const after = this.transaction.endsBefore();
    let onSent = (): void => undefined;
    const handed = new Promise<void>((resolve) => {
      onSent = resolve;
    });
    let onDone = (): void => undefined;
    const done = new Promise<void>((resolve) => {
      onDone = resolve;
    });
    // What is called after it, anywhere on the request's connection, is sent after it: after a
    // `ROLLBACK` once it is handed over; after a `COMMIT` once it is done, since one that fails
    // (a deferred foreign key) leaves its nested transaction open, aborted, on the connection.
    if (control?.kind === 'commit') this.transaction.endCalled(done);
    if (control?.kind === 'rollback') this.transaction.endCalled(handed);
    // Whether it runs inside a nested transaction of the view's (judged in turn, as it runs).
    let inside = false;
    const run = () => {
      inside = this.depth > 0;
      return this.transaction.onView(this, callback ? args.slice(0, -1) : args, { after, onSent });
    };
    const result = this.pending === 0 ? run() : this.turn.then(run);
    this.inTurn(result);
    // Done without being sent (refused, failed on its way): handed over as far as it goes.
    result.then(onSent, onSent);
    result.then(onDone, onDone);
    // Its failure is the caller's to see: here only when it is over.
    this.releasable = (control ? result : Promise.race([handed, result])).catch(() => undefined);
    // A statement of its nested transaction still running when the view was given back to be
    // destroyed (an `UPDATE` stuck on a lock, given up on by `release(true)`): that release
    // rolled it back, and node-postgres would have failed it ("Connection terminated"). Its
    // success is not told, so that the work given up on does not go on as if it had run.
    const answer = control
      ? result
      : result.then((value) => {
          if (inside && this.destroyed) throw new ReleasedClientError(true);
          return value;
        });
    if (!callback) return answer;
    answer.then(
      (value) => callback(undefined, value),
      (error: unknown) => callback(error),
    );
    return undefined;
  }

  /**
   * `LISTEN` and `UNLISTEN` (see `listenTextOf`): on a connection of its own, whose
   * notifications are told on the view; given back with it.
   */
  private listener?: ViewListener;
  /** Stops telling the view what its connection apart hears (see `forwardEvents`). */
  private stopForwarding?: () => void;

  /** `run`'s answer to a statement, in whichever form node-postgres took it (a callback last). */
  private answered(args: unknown[], run: (statement: unknown[]) => Promise<unknown>): unknown {
    const last = args[args.length - 1];
    const callback = typeof last === 'function' ? (last as (...r: unknown[]) => void) : undefined;
    const result = run(callback ? args.slice(0, -1) : args);
    if (!callback) return result;
    result.then(
      (value) => callback(undefined, value),
      (error: unknown) => callback(error),
    );
    return undefined;
  }

  /** A statement on its connection of its own, in whichever form node-postgres took it. */
  private queryApart(args: unknown[]): unknown {
    const apart = this.apart!;
    if (isSubmittable(args[0])) {
      const submittable = args[0] as { handleError?: (error: unknown) => void };
      apart.then(
        (client) => client.query(...(args as [never])),
        (error: unknown) => submittable.handleError?.(error),
      );
      return submittable;
    }
    const last = args[args.length - 1];
    const callback = typeof last === 'function' ? (last as (...r: unknown[]) => void) : undefined;
    const result = apart.then((client) =>
      (client.query as (...a: unknown[]) => Promise<unknown>)(
        ...(callback ? args.slice(0, -1) : args),
      ),
    );
    if (!callback) return result;
    result.then(
      (value) => callback(undefined, value),
      (error: unknown) => callback(error),
    );
    return undefined;
  }

  release(destroy?: boolean | Error): void {
    if (this.released) return;
    this.released = true;
    // Given back with the error its listener connection was lost with (told on the view as
    // its client's 'error'): that connection is gone already, the request's is sound.
    if (destroy instanceof Error && destroy === this.listener?.lost) destroy = undefined;
    if (destroy) this.destroyed = true;
    this.listener?.release();
    // Its stand-ins too: a nested transaction its code left open there rolls back, a
    // connection apart goes back to the pool.
    for (const { view, stop } of this.standIns.values()) {
      stop();
      view.release();
    }
    this.standIns.clear();
    if (this.apart) {
      // Given back to the pool as node-postgres would: its own connection, not the request's.
      this.apart.then(
        (client) => {
          this.stopForwarding?.();
          client.release(destroy);
        },
        () => undefined,
      );
      return;
    }
    // To be destroyed, as node-postgres would: it stood for the request's connection.
    if (destroy) this.transaction.destroyAtEnd = true;
    // In call order, as node-postgres runs a client's queries: a `COMMIT` called before it (a
    // `return client.query('COMMIT')` whose `finally` releases) ends its nested transaction
    // first, and only what is still open then rolls back. A statement already handed to
    // node-postgres holds nothing back (a `release(true)` after a timeout on an `UPDATE` stuck
    // on a lock): the `ROLLBACK TO` is sent at once, queued behind it on the connection and
    // ahead of what the handler sends after the release; waiting for it to be done would keep
    // the nested transaction open, and that later work inside it, for as long as it runs.
    const release = () => {
      if (this.depth > 0) this.transaction.onRelease(this);
    };
    if (this.pending === 0) return release();
    const released = this.releasable.then(release);
    this.inTurn(Promise.all([this.turn, released]));
    // Its rollback is an end too: what is called after the release, anywhere on the request's
    // connection, is sent after it (behind a `COMMIT` that failed, outside its savepoint).
    this.transaction.endCalled(released);
  }

  /** node-postgres' own quoting of a name (a client's method too: code quotes with it). */
  escapeIdentifier(name: string): string {
    return pg.escapeIdentifier(name);
  }

  /** node-postgres' own quoting of a string constant. */
  escapeLiteral(value: string): string {
    return pg.escapeLiteral(value);
  }
}

function isThenable(value: unknown): value is Promise<unknown> {
  return typeof (value as { then?: unknown } | null)?.then === 'function';
}

function emptyResult(command: string): QueryResult {
  return { command, rowCount: null, oid: 0, rows: [], fields: [] };
}

/**
 * Handed to phase work as its first argument on a pool: TypeORM's EntityManager is not there,
 * and any use of it says what to do instead.
 */
const managerUnavailable = new Proxy({} as EntityManager, {
  get(_target, property) {
    if (property === 'then' || typeof property === 'symbol') return undefined;
    throw new Error(
      `The first argument of a phase's work (manager.${String(property)}) is TypeORM's ` +
        'EntityManager, which an app on a node-postgres pool (IdempotencyModule with `pool`) ' +
        'does not have: write with your own client (Prisma, Drizzle, Kysely, pg) built on that ' +
        'pool; it joins the phase’s transaction.',
    );
  },
});
