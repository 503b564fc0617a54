import { type Pool, type PoolClient, type QueryConfig, type QueryResult } from 'pg';
import {
  type DataSource,
  type EntityManager,
  type QueryRunner,
  type ReplicationMode,
} from 'typeorm';

import {
  isConnectionError,
  isReadOnlyError,
  isRolledBackError,
  isServerError,
  isTransactionAbortedError,
  markAskedByApp,
  markReadOnlyByHandler,
} from '../connection/connection-errors.js';
import { acquire, cancelled, queryWithDeadline, withDeadline } from '../connection/deadline.js';
import { libraryStatement, pinnedText } from '../connection/library-path.js';
import { withLibraryTypes } from '../connection/library-types.js';
import {
  answersSameAsked,
  type CancelAsked,
  forgetCancelAsked,
  noteCancelAsked,
} from '../connection/cancel-asked.js';
import { beginWith, carriedStatement } from '../connection/begin-with.js';
import { stillRunningAfter } from '../connection/read-timeout.js';
import { fencedCommit, isFenceLost } from '../claim/fenced-commit.js';
import {
  type BegunSessionState,
  begunStateOf,
  CAPTURE_SESSION_STATE,
  pinSearchPath,
  restoreSessionState,
  runSurrounded,
  swapSessionState,
  UNPIN_SEARCH_PATH,
} from '../connection/session-state.js';
import {
  decideIsolation,
  isAboveReadCommitted,
  isIsolationLevel,
  type IsolationLevel,
} from './isolation-level.js';
import {
  IsolationLevelRefusedError,
  SessionAdvisoryLockRefusedError,
  SessionSettingRefusedError,
  UnreadableStatementRefusedError,
  TransactionAbortedError,
  TransactionControlRefusedError,
  TransactionEndedError,
  RetriedTryStatementError,
  NestedFirstPhaseError,
  StatementBesidePhaseRefusedError,
} from './seam-errors.js';
import { inRetriedTry, refuseRetriedTry } from './handler-try.js';
import { strongerRefusal } from './failure.js';
import {
  type ClaimInText,
  CLAIMED_SAVEPOINT,
  claimStatements,
  claimWaitBounded,
  idleBound,
  notePrepared,
  recoveryOf,
} from './claim-at-begin.js';
import { unreadableOf } from './sql/sql-parse.js';
import { readyForNext, runsToItsEnd } from './still-running.js';
import { endOf } from './submitted-end.js';
import { answered } from './answered.js';
import {
  rollsBackToSavepoint,
  sessionAdvisoryLockOf,
  sessionSettingOf,
  transactionControlOf,
} from './sql/sql-text.js';
import {
  ownStatementFailure,
  READ_ONLY_BY_DEFAULT,
  readOnlyByHandlerFailure,
} from './own-statement-failure.js';
import { type JoinableTransaction, type PoolJoin, transactionScope } from './transaction-scope.js';
import { type FencedStatement, type StoreTransaction } from '../shapes/store-transaction.js';
export { type FencedStatement } from '../shapes/store-transaction.js';

/**
 * The request's transaction on the app's pool, whatever data layer the handler writes through:
 * opened by its first statement, not before, so that a handler that waits on something else
 * (an HTTP call, a queue) before it writes holds no connection while it waits. It ends with a
 * fenced statement of the library's (the stored response, or a phase's recovery point) and
 * `COMMIT`, or with `ROLLBACK`; with no statement of its own, the fenced statement alone
 * commits, so a handler that wrote nothing costs one statement, not three.
 *
 * Every wait on PostgreSQL the library makes here is bounded by `timeoutMs`; a commit whose
 * answer does not come in time drops its connection (PostgreSQL then rolls back whatever had
 * not committed) and the caller answers 503: a retry finds the work either done or not done.
 *
 * What joins it is the data layer's: TypeORM's query runner (`LazyTransaction`), or the
 * node-postgres pool that Prisma, Drizzle and Kysely run on (`PoolTransaction`).
 */
export abstract class RequestTransaction implements JoinableTransaction, StoreTransaction {
  private openingNow?: Promise<PoolClient>;
  /** The request's connection, once it is there (see `cancelAsked`). */
  private connected?: PoolClient;

  /** The request's connection, on its way or there; undefined before the first statement. */
  protected get opening(): Promise<PoolClient> | undefined {
    return this.openingNow;
  }

  protected set opening(opening: Promise<PoolClient> | undefined) {
    this.openingNow = opening;
    this.connected = undefined;
    opening?.then(
      (client) => {
        if (this.openingNow === opening) this.connected = client;
      },
      () => undefined,
    );
  }

  /**
   * Code in its scope asked PostgreSQL to cancel or end `asked.pid` (see `watchCancels`): if
   * that is the backend of the request's connection, what it meets there for it (the
   * cancelled statement's 57014, the connection's loss) is the request's own doing, which its
   * retry asks for again: no passing failure (see `isCancelAskedForError`).
   */
  cancelAsked(asked: CancelAsked): void {
    const client = this.connected;
    if (client === undefined || this.released) return;
    if ((client as { processID?: unknown }).processID === asked.pid) {
      noteCancelAsked(client, asked.kind);
    }
  }

  /** Set once `BEGIN` is on its way (alone, or in front of the first statement). */
  protected beginning?: Promise<void>;
  protected state: 'pending' | 'ending' | 'ended' = 'pending';
  /** The commit or rollback under way: a second end waits for it rather than racing it. */
  protected ending?: Promise<unknown>;
  private released = false;
  /** Whether it committed: work that comes after then runs on its own, as after any answer. */
  protected committed = false;
  /** Whether the commit or rollback under way has an outcome (`committed` is then final). */
  protected settled = false;
  /**
   * The last statement error its code saw: what aborted the transaction, if it was aborted.
   * Set through `noteFailure`, so that the "transaction is aborted" (25P02) of a statement
   * sent after a caught failure never hides the failure itself (a deadlock, a lock timeout),
   * which is what the request met and how it is answered.
   */
  lastError?: unknown;
  /**
   * What an error thrown by code that ran in this transaction means: a "transaction is
   * aborted" (25P02) after an earlier failure that code caught is that failure's, as when the
   * commit meets it (`TransactionAbortedError`); any other error is itself.
   */
  failureOf(error: unknown): unknown {
    this.markOwnReadOnly(error);
    this.markOwnCancel(error);
    if (!isTransactionAbortedError(error) || this.lastError === undefined) return error;
    return this.lastError === error ? error : new TransactionAbortedError(this.lastError);
  }

  /**
   * What a failure its code threw is to be classified as: a "transaction is aborted" after a
   * failure its code caught is that failure (a deadlock, a lock timeout).
   */
  causeOf(error: unknown): unknown {
    const cause = isTransactionAbortedError(error) ? (this.lastError ?? error) : error;
    this.markOwnReadOnly(cause);
    this.markOwnCancel(cause);
    return cause;
  }

  /**
   * A 57014 or a lost connection its code throws after one of its statements met the answer
   * to its own cancel or end (`lastError`, marked by `watchCancels`) is that answer, as a data
   * layer hands it on (see `answersSameAsked`): Prisma rebuilds node-postgres' error, so the
   * mark is carried onto what reaches us, and the request answers 500 `transaction_aborted`
   * whether its handler caught the error or let it through.
   */
  private markOwnCancel(error: unknown): void {
    if (!isRemote(error) && answersSameAsked(this.lastError, error)) markAskedByApp(error);
  }

  /**
   * A 25006 its code throws after one of its statements met a 25006 of its own making (see
   * `beganReadOnly`) is that one, as a data layer hands it on: Drizzle wraps node-postgres'
   * error, Prisma rebuilds it, so the mark on the driver's error is not on what reaches us.
   */
  private markOwnReadOnly(error: unknown): void {
    if (this.ownReadOnlyMet && isReadOnlyError(error) && !isRemote(error)) {
      markReadOnlyByHandler(error);
    }
  }

  /** Whether a statement of its code met a 25006 of its own making. */
  private ownReadOnlyMet = false;

  /**
   * Whether the transaction was read only when it began (read in the `BEGIN`'s round trip): a
   * standby, or a server fenced read only. Then a write refused (25006) is an outage to retry;
   * in a transaction that began read-write it is the handler's own doing (a function of the
   * app's set `transaction_read_only`), which no retry passes.
   */
  protected beganReadOnly?: boolean;
  /**
   * The role, session authorization and search path the transaction began with, read back
   * from the `BEGIN`'s round trip: the library's own statements put them back from here, which
   * the handler's `RESET ALL` (resetting the settings they are kept in on the server) cannot
   * reach (see `restoreSessionState`).
   */
  private begunState?: BegunSessionState;

  /**
   * Notes a statement of its code's that succeeded: a `ROLLBACK TO SAVEPOINT` of the app's own
   * (a savepoint it made with raw SQL) ends the abort of a failure inside it, which then no
   * longer decides the request's answer (a stream that fails later is "retry later", not the
   * 500 of an aborted transaction).
   */
  protected noteSuccess(text: unknown): void {
    if (this.lastError !== undefined && rollsBackToSavepoint(text)) this.lastError = undefined;
  }

  /** Notes a statement's failure (see `lastError`). */
  protected noteFailure(error: unknown): void {
    if (isReadOnlyError(error) && this.beganReadOnly === false && !isRemote(error)) {
      markReadOnlyByHandler(error);
      this.ownReadOnlyMet = true;
    }
    if (this.lastError !== undefined && isTransactionAbortedError(error)) return;
    this.lastError = error;
  }

  /**
   * The isolation level the request's transaction begins at: the route's, or the one its first
   * nested transaction asked for. Unset, the data layer's (a TypeORM 1 DataSource's), else the
   * server's.
   */
  isolationLevel?: IsolationLevel;
  /**
   * The level PostgreSQL gives a transaction begun without one: `default_transaction_isolation`
   * of the database, role or connection (`IdempotencyDatabase` reads it once). A default above
   * READ COMMITTED is such a transaction as much as a level the route asks for: its reads must
   * be in it, and the claim's renewals too. Read when asked, not when it was made: a
   * transaction made before the database was first reached (down at start-up) learns it with
   * its claim (adversary 39c: a oneCommit claim in a plain BEGIN at SERIALIZABLE).
   */
  get serverLevel(): IsolationLevel | undefined {
    return this.serverLevelNow?.();
  }
  /** Where `serverLevel` is read from (the app's database, once it has asked). */
  serverLevelNow?: () => IsolationLevel | undefined;
  /**
   * The search path the start-up check found the library's tables through (`IdempotencyDatabase`
   * keeps it), read when asked: the library's own statements in this transaction (its claim,
   * its fenced commit, its renewals) run with it, whatever the session's path is (a pooled
   * connection a tenant's code left on its schema). Undefined: the path the transaction began
   * with, as before.
   */
  libraryPathNow?: () => string | undefined;
  /**
   * A statement of the library's opens the transaction with the session's search path (a
   * consumer's message recorded first, `query`): the library's later statements in it keep to
   * that path, where the row it wrote is (see `libraryPath`). Not pinned yet: the message's
   * record would need the pin in the round trip of the transaction's `BEGIN`.
   */
  private ownPathOfSession = false;

  /** See `ownPathOfSession`: said before the transaction's first statement. */
  keepSessionPathForOwnStatements(): void {
    this.ownPathOfSession = true;
  }

  /** The search path of the library's statements in it (see `librarySearchPath`). */
  private libraryPath(): string | undefined {
    return this.ownPathOfSession ? undefined : this.libraryPathNow?.();
  }
  /** The level its `BEGIN` was sent with (else the server's, if known), once sent. */
  protected begunAt?: IsolationLevel;
  /** A refused attempt of its code to end it: it can then only roll back. */
  private refused?: TransactionControlRefusedError;

  /**
   * What the seam refused of its code, if anything (see `refuse`): the request can then only
   * roll back, whatever its handler made of the refusal (see `refusalAnswer`).
   */
  get refusal(): TransactionControlRefusedError | undefined {
    return this.refused;
  }

  /**
   * A refusal of the seam's met in a transaction of the request's own (a `PhaseRunner`
   * phase's): the request's too, so that what its handler makes of it is answered as in the
   * handler itself (`refusalAnswer`), and the request cannot commit past it (adversary 100).
   */
  refusedInPhase(refusal: TransactionControlRefusedError | undefined): void {
    if (refusal) this.refused = strongerRefusal(this.refused, refusal);
  }

  /** The request's transaction a phase's hands its refusals on to (see `refusalsTo`). */
  private refusalsGoTo?: RequestTransaction;

  /**
   * Hands what the seam refuses in it (a phase's transaction) on to `request` (its request's)
   * as it is met, and what it already refused: the request then knows at once, so that
   * whatever of it starts afterwards (a phase, `call()` or `finish()` beside this one, its
   * handler's answer) goes by the refusal, not only what starts after this phase's work ends
   * (adversary 103).
   */
  refusalsTo(request: RequestTransaction): void {
    this.refusalsGoTo = request;
    request.refusedInPhase(this.refused);
  }
  /**
   * Awaited before the `BEGIN` of a transaction above READ COMMITTED: the lease renewal on
   * its way (see `LeaseRenewals`). Such a transaction must see the key's row as it will stay
   * until it commits: a renewal committed after its snapshot would make its stored answer's
   * `UPDATE` fail with a serialization failure, so renewals land before it begins, and run
   * inside it once it has (`isolated`).
   */
  beforeIsolatedBegin?: () => Promise<unknown>;
  /**
   * A statement (given a quoting function for its values) that the `BEGIN` above READ
   * COMMITTED carries in its round trip: the claim's lease renewed there, so that the key's
   * row is locked by the transaction itself, not by a renewal the handler's savepoint may roll
   * back (a rolled-back savepoint releases the row locks taken inside it, and a retry would
   * take a live worker's key over). Set with `beforeIsolatedBegin`.
   */
  holdAtBegin?: (literal: (value: string) => string) => string;

  constructor(
    protected readonly pool: () => Pool,
    protected readonly timeoutMs: number,
    /** Whether code in the scope joins it; explicit use of its handles always does. */
    public joinable: boolean,
    /** False behind a pooler in transaction mode: the fenced statement is sent unnamed. */
    protected readonly namedStatements = true,
  ) {}

  /**
   * Whether code in its scope joins it once the handler starts (an atomic route's; see
   * `IdempotencyContext.startHandler`): a runner made before, in its scope, joins where used.
   */
  joinsAtHandler = false;

  /**
   * Whether its code has opened it (a statement of the code's, or its wait for the
   * connection): a claim it began with (`beginWithClaim`) does not count.
   */
  get begun(): boolean {
    return this.codeTouched;
  }

  /** Set once its code asked for the connection (see `connection()`). */
  private codeTouched = false;

  /**
   * Whether the key's claim is in its uncommitted work (`beginWithClaim`): it then commits
   * with the handler's effects and the stored answer, or vanishes with a rollback.
   */
  get holdsClaim(): boolean {
    return this.claimState === 'held';
  }

  /**
   * Whether the key's claim is not committed yet, in its transaction or in a phase's it handed
   * it to (`handClaimTo`): a key derived from it would not survive a crash before that commit.
   */
  get claimUncommitted(): boolean {
    return this.claimState === 'held' || this.claimState === 'handed';
  }

  /**
   * Whether the claim it held was rolled back with it: nothing of the key is left to give
   * back (a request waiting on it has claimed it, or will).
   */
  get claimErased(): boolean {
    return this.claimState === 'erased';
  }

  /**
   * `handed`: its claim's open transaction is a phase's now (`handClaimTo`), which commits the
   * claim with its work, or hands it back; until then it holds nothing, and waits (`handing`).
   */
  private claimState: 'apart' | 'held' | 'handed' | 'erased' | 'committed' = 'apart';

  /** The transaction it handed its claim to (`handClaimTo`) settles its state: see `settleHanded`. */
  private handing?: { settled: Promise<void>; settle: () => void };

  /** The phase's transaction it handed its claim to (`handClaimTo`). */
  private handedTo?: RequestTransaction;

  /** The request's transaction whose claim it took over (`handClaimTo`), until it settles. */
  private handedBy?: RequestTransaction;

  /**
   * Hands the claim it holds, in its open transaction with nothing of its code's in it, to
   * `phase`: a phase's transaction, whose work then runs after the claim and commits with it
   * (the claim with its first phase: one commit, not two). It holds nothing meanwhile; `phase`
   * commits the claim (then it is as after `commitClaimAlone`), or rolls its own work back to the
   * claim's savepoint and hands the claim back (`takeBack`), or loses it with its connection.
   * False, and nothing changed, when it cannot: no claim held, its code began it, or `phase` is
   * not a transaction of this kind.
   */
  handClaimTo(phase: StoreTransaction): boolean {
    if (!(phase instanceof RequestTransaction) || phase.opening || phase.state !== 'pending') {
      return false;
    }
    if (this.claimState !== 'held' || this.codeTouched || this.state !== 'pending') return false;
    if (!this.opening || !this.beginning) return false;
    phase.opening = this.opening;
    phase.beginning = this.beginning;
    phase.begunAt = this.begunAt;
    phase.beganReadOnly = this.beganReadOnly;
    phase.claimState = 'held';
    phase.handedBy = this;
    this.handedTo = phase;
    this.opening = undefined;
    this.beginning = undefined;
    this.begunAt = undefined;
    this.beganReadOnly = undefined;
    this.claimState = 'handed';
    let settle!: () => void;
    this.handing = { settled: new Promise<void>((resolve) => (settle = resolve)), settle };
    return true;
  }

  /**
   * The phase it handed its claim to has ended with it: committed (or its outcome unknown: the
   * request then fails, as when the claim's commit alone fails), or rolled back with it.
   */
  private settleHanded(outcome: 'apart' | 'erased'): void {
    this.claimState = outcome;
    this.handedTo = undefined;
    this.handing?.settle();
  }

  /** Tells the request's transaction it took the claim from how the claim ended. */
  private settleHandedBy(): void {
    const by = this.handedBy;
    if (!by) return;
    this.handedBy = undefined;
    by.settleHanded(this.claimState === 'erased' ? 'erased' : 'apart');
  }

  /**
   * The phase it handed its claim to rolled its work back to the claim's savepoint: the claim
   * is its again, on that connection, as before the phase. If it opened a connection of its own
   * meanwhile (a statement of its code's beside the phase), the claim commits alone there; if
   * it ended meanwhile, the claim goes with a rollback.
   */
  private async takeBack(client: PoolClient): Promise<void> {
    this.handedTo = undefined;
    if (this.state === 'pending' && !this.opening) {
      this.opening = Promise.resolve(client);
      this.beginning = Promise.resolve();
      this.claimState = 'held';
      this.handing?.settle();
      return;
    }
    try {
      if (this.state !== 'pending') throw new TransactionEndedError();
      await this.commitClaimOn(client);
      client.release();
      this.settleHanded('apart');
    } catch (error) {
      // Its outcome unknown, or nothing to commit it with: the connection goes, and with it
      // whatever had not committed.
      client.release(asError(error));
      this.settleHanded(this.state === 'pending' ? 'apart' : 'erased');
    }
  }

  /**
   * The lease renewal the claim's commit alone carries (its values quoted by `literal`): the
   * lease was set when the claim was made, and the handler may have worked past it before its
   * first phase; committed as it was, the claim would be free to take over from a live worker.
   */
  renewAtClaimCommit?: (literal: (value: string) => string) => string;

  /** The commit of the claim alone under way, for a second caller to wait on. */
  private claimCommitting?: Promise<void>;

  /**
   * Opens the transaction with the key's claim, in one round trip: `BEGIN`, the session's
   * state kept (as for any first statement), the key's lock (`lock`, its values quoted by
   * `literal`) and `claim` (the store's statement, run from the session's prepared one: see
   * `claimStatements`) waiting at most `waitMs` on a claim another request has not committed
   * yet (then 55P03), and a savepoint that the stored answer of a handler's error rolls back
   * to, keeping the claim. Its rows; the connection stays the transaction's.
   */
  async beginWithClaim(
    lock: (literal: (value: string) => string) => string,
    claim: (literal: (value: string) => string) => ClaimInText,
    waitMs: number,
    /** How long the transaction may sit idle before PostgreSQL ends it (see `idleBound`). */
    idleMs: number,
  ): Promise<Record<string, unknown>[]> {
    if (this.opening) throw new Error("the claim must be the transaction's first statement");
    this.claimState = 'held';
    const opening = acquire(this.pool(), this.timeoutMs);
    this.opening = opening;
    const client = await opening;
    const literal = (value: string) => client.escapeLiteral(value);
    const statement = claim(literal);
    const [bounded, restored] = claimWaitBounded(waitMs);
    const send = async (): Promise<QueryResult[]> => {
      const claiming = claimStatements(client, statement, this.namedStatements);
      // The claim with the library's search path, the handler's back after it (see
      // `libraryPathNow`): in the same text, no round trip more.
      const pinned = this.libraryPath();
      const pin = pinned === undefined ? [] : [pinSearchPath(pinned)];
      const before = [this.beginText(), CAPTURE_SESSION_STATE, ...bounded, lock(literal), ...pin];
      const text = [
        ...before,
        ...claiming,
        ...(pinned === undefined ? [] : [UNPIN_SEARCH_PATH]),
        restored,
        idleBound(idleMs),
        `SAVEPOINT ${CLAIMED_SAVEPOINT}`,
      ].join('; ');
      // A simple query of several statements: node-postgres hands back one result for each.
      const results = (await queryWithDeadline(
        client,
        { text },
        this.timeoutMs + waitMs,
      )) as unknown as QueryResult[];
      notePrepared(client, statement);
      return [results[1], results[before.length + claiming.length - 1]];
    };
    const sent = send().catch(async (error: unknown) => {
      // The session's prepared claim was not as known here (reset, prepared by another copy
      // of the library, or planned for a table since changed): set right, sent again, once.
      const recovery = this.namedStatements ? recoveryOf(client, statement, error) : undefined;
      if (recovery === undefined) throw error;
      await queryWithDeadline(client, { text: recovery }, this.timeoutMs);
      return send();
    });
    this.beginning = sent.then(([captured]) => {
      this.beganReadOnly = (captured?.rows?.[0] as { read_only?: string })?.read_only === 'on';
      this.begunState = begunStateOf(captured?.rows?.[0]);
    });
    // Its own failure is the caller's: those who wait on the BEGIN see it as theirs.
    this.beginning.catch(() => undefined);
    try {
      const [, claimed] = await sent;
      return claimed.rows as Record<string, unknown>[];
    } catch (error) {
      await this.rollback();
      throw error;
    }
  }

  /**
   * Commits the claim it holds alone, before its code sent anything: the design's first
   * commit, for a request that is about to leave the database (a phase, a call with a derived
   * key) or needs a transaction of another level. The transaction is then as new, opened by its
   * code's first statement. Nothing when it holds no claim; refused once its code began it.
   */
  commitClaimAlone(): Promise<void> {
    if (this.claimState === 'handed') {
      // Asked from inside the phase that holds it (a `call()` or `run()` in that phase's
      // work): that phase ends only after this, which would wait for it for ever (adversary
      // 48c). Phases do not nest where the first one commits with the claim.
      if (transactionScope.getStore() === this.handedTo) {
        return Promise.reject(new NestedFirstPhaseError());
      }
      return this.handing!.settled.then(() => this.commitClaimAlone());
    }
    if (this.claimState !== 'held') return this.claimCommitting ?? Promise.resolve();
    if (this.codeTouched || this.ended) {
      return Promise.reject(new Error('the claim can commit alone only before any statement'));
    }
    this.claimCommitting ??= (async () => {
      const client = await this.opening!;
      try {
        await this.beginning;
        await this.commitClaimOn(client);
      } catch (error) {
        // Its outcome unknown: the connection goes (PostgreSQL rolls back what had not
        // committed), and so does the request, which could not tell whether it owns the key.
        this.end(client, error);
        this.claimState = 'apart';
        throw error;
      }
      client.release();
      this.opening = undefined;
      this.beginning = undefined;
      this.begunAt = undefined;
      this.beganReadOnly = undefined;
      this.claimState = 'apart';
      this.settleHandedBy();
    })();
    return this.claimCommitting;
  }

  /**
   * Undoes its code's effects and keeps the claim it holds (rolled back to the savepoint of
   * `beginWithClaim`): for a handler's error, stored without its effects. Its code is refused
   * from now on, as after a rollback. False when it holds no claim.
   */
  async undoEffects(): Promise<boolean> {
    // Its claim with a phase (`handClaimTo`), or committing alone: what it holds after that
    // decides (adversary 48c: a handler's error while its first phase ran beside it). Back
    // with it, the claim is undone to; committed, the answer is stored apart, as by default.
    if (this.claimState === 'handed') await this.handing!.settled;
    await this.claimCommitting?.catch(() => undefined);
    if (this.claimState !== 'held' || this.state !== 'pending') return false;
    this.effectsUndone = true;
    const client = await this.opening!;
    await this.beginning;
    // Behind its code's statements still running, cancelled at its deadline (see the method).
    await this.codeStatementsDoneOrCancelled(client);
    await queryWithDeadline(
      client,
      { text: `ROLLBACK TO SAVEPOINT ${CLAIMED_SAVEPOINT}` },
      this.timeoutMs,
    );
    return true;
  }

  /**
   * Waits for its code's statements still running on `client` (`codeStatementsDone`) at most
   * its deadline (`databaseTimeoutMs`), then cancels the one running and waits for it to end
   * (`cancelled`): for a rollback to the claim behind them, as `rollbackOn`'s `ROLLBACK`, sent
   * behind them under its deadline, cancels them at it. What they do is undone anyway: their
   * time is the handler's only when what they wrote commits (`codeStatementsDone`). Waited
   * for unbounded, one waiting on a lock held elsewhere held the failed request, its
   * connection, and its key (the heartbeat renewing it) for as long as that lock: every retry
   * 409 (adversary 83). Cancelled, the transaction is aborted, which the rollback to the
   * savepoint mends, and the claim is kept: the handler's error is stored with it. Sent at
   * once instead under `queryWithDeadline`, the rollback itself would hear of the deadline
   * and drop the connection, and the claim with it: a 503 for the handler's error.
   */
  private async codeStatementsDoneOrCancelled(client: PoolClient): Promise<void> {
    const done = this.codeStatementsDone();
    await withDeadline(done, this.timeoutMs, 'its code statements', () =>
      cancelled(client, done),
    ).catch(() => undefined);
  }

  /** Its code's effects were undone (`undoEffects`): what it sends after is refused. */
  protected effectsUndone = false;

  /**
   * Commits the claim it holds alone, its code's effects undone (`undoEffects`), with a fresh
   * lease (`renewAtClaimCommit`): the key stays held, by its lease and heartbeat, without the
   * connection (a handler's error waiting on a slow filter). It ends: to its code, as a
   * rollback. Nothing when it holds no claim or its effects were not undone.
   */
  async commitUndoneClaim(): Promise<void> {
    if (this.claimState !== 'held' || !this.effectsUndone || this.state !== 'pending') return;
    this.state = 'ending';
    const committing = (async () => {
      const client = await this.opening!;
      try {
        await this.commitClaimOn(client);
      } catch (error) {
        // Its outcome unknown: the connection goes; a release after is fenced either way.
        this.end(client, error);
        throw error;
      }
      this.claimState = 'apart';
      this.end(client);
    })();
    this.track(committing);
    await committing;
  }

  /** `COMMIT` of the claim alone, with its lease renewed in the same round trip. */
  private async commitClaimOn(client: PoolClient): Promise<void> {
    const renewal = this.renewAtClaimCommit?.((value) => client.escapeLiteral(value));
    // The renewal with the library's search path (the claim's round trip put the session's
    // back after the claim), in the same text: no round trip more.
    await queryWithDeadline(
      client,
      { text: renewal ? pinnedText(`${renewal}; COMMIT`, this.libraryPath()) : 'COMMIT' },
      this.timeoutMs,
      { commits: true },
    );
  }

  /**
   * How long work it runs in `IdempotentTransaction.outside()` may wait for a connection of
   * `pool`: its own deadline while it holds (or awaits) a connection of that pool, since it
   * gives that one back only once the work is done; undefined otherwise (see `OutsideScope`).
   */
  outsideDeadline(pool: object): number | undefined {
    if (!this.opening || this.ended) return undefined;
    try {
      return this.pool() === pool ? this.timeoutMs : undefined;
    } catch {
      return undefined; // TypeORM's DataSource destroyed meanwhile: nothing of it is held
    }
  }

  /**
   * Whether it committed or rolled back (or is doing so), as its code sees it: after its
   * effects were undone (`undoEffects`) too, though the library's own statements and commit
   * still run in it.
   */
  get ended(): boolean {
    return this.state !== 'pending' || this.effectsUndone;
  }

  /**
   * Whether its code has a nested transaction open that it made read only (`BEGIN READ ONLY`,
   * `SET TRANSACTION READ ONLY` in it): a lease renewal inside the transaction would be
   * refused there (25006) and abort it. The seams say.
   */
  get readOnlyNow(): boolean {
    return false;
  }

  /** Whether it is to begin above READ COMMITTED, as far as is known before it begins. */
  get plannedAboveReadCommitted(): boolean {
    return isAboveReadCommitted(this.plannedLevel());
  }

  /**
   * Whether the claim's lease is renewed inside it: it began above READ COMMITTED (see
   * `beforeIsolatedBegin`), or it holds the claim uncommitted (`beginWithClaim`), where a
   * renewal apart would not see the row and where its statements keep the session from the
   * idle timeout that frees the claim of a worker gone without a word.
   */
  get renewsInside(): boolean {
    return this.isolated || (this.claimState === 'held' && this.state === 'pending');
  }

  /**
   * Whether its code has opened it (asked for its connection): a claim it began with
   * (`oneCommit`) does not count, so that a plain read before the first write still runs apart.
   */
  protected get openedByCode(): boolean {
    return this.opening !== undefined && (this.claimState !== 'held' || this.codeTouched);
  }

  /** Whether a statement of its code has begun it (a claim it began with does not count). */
  protected get codeBegan(): boolean {
    return this.beginning !== undefined && (this.claimState !== 'held' || this.codeTouched);
  }

  /** Whether it began above READ COMMITTED and has not ended: see `beforeIsolatedBegin`. */
  get isolated(): boolean {
    return this.beginning !== undefined && !this.ended && isAboveReadCommitted(this.begunAt);
  }

  /** Whether its `BEGIN` waits for `beforeIsolatedBegin` (then it is sent alone). */
  private waitsBeforeBegin(): boolean {
    return this.beforeIsolatedBegin !== undefined && isAboveReadCommitted(this.plannedLevel());
  }

  /**
   * Runs one statement of the library's own in the transaction (a body stored by pointer, a
   * processed message's id): its rows.
   */
  abstract query<R = Record<string, unknown>>(text: string, values: unknown[]): Promise<R[]>;

  /** TypeORM's EntityManager of the transaction (a stand-in that says why, on a pool). */
  abstract get manager(): EntityManager;

  /**
   * The manager services ask for by name (`IdempotentTransaction`): as the DataSource's,
   * whose saves each open a transaction of their own, so that a service does the same on
   * every route. `manager` is a transaction's, handed to a phase's work.
   */
  get sharedManager(): EntityManager {
    return this.manager;
  }

  joinedRunner?(dataSource: DataSource, mode: ReplicationMode): QueryRunner | undefined;

  joinedPool?(pool: object): PoolJoin | undefined;

  otherPool?(pool: object): void;

  /**
   * What its data layer's code left open at the commit (a cursor, a nested transaction), as a
   * refusal: the request can then only roll back. Nothing, unless a data layer says.
   */
  protected refuseLeftOpen(): void {}

  /** The level a data layer's own settings give the transaction (TypeORM 1's option). */
  protected configuredLevel(): string | undefined {
    return undefined;
  }

  /**
   * Runs `statement` last and commits; false (everything rolled back) when it touched no row,
   * which for the library's fenced statements means the lease was lost.
   */
  commitWith(statement: FencedStatement): Promise<boolean> {
    this.refuseLeftOpen();
    if (this.state !== 'pending') return Promise.reject(new TransactionEndedError());
    this.state = 'ending';
    const committing = this.commitNow(statement);
    this.track(committing);
    return committing;
  }

  /** Commits what its code did, with no statement of the library's (phases without a key). */
  commitPlain(): Promise<void> {
    this.refuseLeftOpen();
    if (this.ended) return Promise.reject(new TransactionEndedError());
    this.state = 'ending';
    const committing = this.commitPlainNow();
    this.track(committing);
    return committing;
  }

  private async commitPlainNow(): Promise<void> {
    if (this.refused) return this.refusedEnd();
    const client = await this.opening?.catch((error: unknown) => {
      this.state = 'ended';
      throw error;
    });
    if (!client || !this.beginning) {
      this.state = 'ended';
      if (client) this.end(client);
      this.committed = true;
      return;
    }
    try {
      await this.beginning;
    } catch (error) {
      await this.rollbackOn(client);
      throw new TransactionAbortedError(this.lastError ?? error);
    }
    await this.codeStatementsDone();
    try {
      const { command } = await queryWithDeadline(client, { text: 'COMMIT' }, this.timeoutMs, {
        commits: true,
      });
      // A COMMIT of a transaction that a failed statement aborted is answered ROLLBACK, not
      // an error (its code caught the failure and went on): nothing of it committed.
      if (command === 'ROLLBACK') {
        this.end(client);
        throw new TransactionAbortedError(
          this.lastError ?? new Error('COMMIT was answered ROLLBACK: the transaction was aborted'),
        );
      }
      this.committed = true;
      this.end(client);
    } catch (error) {
      if (error instanceof TransactionAbortedError) throw error;
      if (isTransactionAbortedError(error)) {
        await this.rollbackOn(client);
        throw new TransactionAbortedError(this.lastError ?? error);
      }
      this.end(client, error);
      throw error;
    }
  }

  private track(ending: Promise<unknown>): void {
    this.ending = ending.then(
      () => (this.settled = true),
      () => (this.settled = true),
    );
  }

  /** Its code tried to end it (and went on): what it did after assumed that ended. */
  private async refusedEnd(): Promise<never> {
    const client = await this.opening?.catch(() => undefined);
    if (client) await this.rollbackOn(client);
    else this.state = 'ended';
    throw new TransactionAbortedError(this.refused);
  }

  /**
   * The fenced statement sent alone, in autocommit, run again (twice at most) when the
   * database rolled it back: at SERIALIZABLE (the server's default), a lease renewal that
   * committed after its snapshot fails it with 40001, though nothing moved the fence. Nothing
   * of it happened, and the fence makes a second run safe.
   */
  private async alone(client: PoolClient, config: QueryConfig): Promise<QueryResult> {
    for (let attempt = 1; ; attempt++) {
      try {
        // With the library's search path, as every statement of its own (see `libraryPath`).
        return await libraryStatement(client, config, this.timeoutMs, this.libraryPath(), {
          commits: true,
        });
      } catch (error) {
        if (attempt < 3 && isRolledBackError(error)) continue;
        throw error;
      }
    }
  }

  private async commitNow(statement: FencedStatement): Promise<boolean> {
    // Its claim with a phase (`handClaimTo`): the key's row is that phase's until it ends.
    await this.handing?.settled;
    // Its code's effects undone, what it tried to end went with them.
    if (this.refused && !this.effectsUndone) return this.refusedEnd();
    const name = this.namedStatements ? statement.name : undefined;
    const config: QueryConfig = { name, text: statement.text, values: statement.values };
    if (!this.opening) {
      this.state = 'ended';
      const client = await acquire(this.pool(), this.timeoutMs);
      try {
        const { rowCount } = await this.alone(client, config);
        client.release();
        this.committed = rowCount === 1;
        return this.committed;
      } catch (error) {
        client.release(asError(error));
        throw ownStatementFailure(error) ?? error;
      }
    }
    const client = await this.opening.catch((error: unknown) => {
      this.state = 'ended';
      throw error;
    });
    if (!this.beginning) {
      // A connection was taken but no statement sent on it: the fenced statement commits alone.
      try {
        const { rowCount } = await this.alone(client, config);
        this.committed = rowCount === 1;
        this.end(client);
        return this.committed;
      } catch (error) {
        this.end(client, error);
        throw ownStatementFailure(error) ?? error;
      }
    }
    try {
      await this.beginning;
    } catch (error) {
      // BEGIN itself failed (its first statement with it): there is no transaction to commit
      // the stored response with, and the handler's first write never ran.
      await this.rollbackOn(client);
      throw new TransactionAbortedError(this.lastError ?? error);
    }
    await this.codeStatementsDone();
    try {
      // The fenced statement and COMMIT in one round trip; a lost fence raises, and the
      // COMMIT after it is skipped.
      await fencedCommit(
        client,
        { ...statement, name },
        this.timeoutMs,
        restoreSessionState(this.begunState, this.libraryPath()),
      );
      // Its code's effects undone (a handler's error stored with its claim): to its code,
      // which must not go on apart, it rolled back.
      this.committed = !this.effectsUndone;
      if (this.claimState === 'held') this.claimState = 'committed';
      this.end(client);
      return true;
    } catch (error) {
      if (isFenceLost(error)) {
        await this.rollbackOn(client);
        return false;
      }
      if (isTransactionAbortedError(error)) {
        await this.rollbackOn(client);
        throw new TransactionAbortedError(this.lastError ?? error);
      }
      // Made read only by the handler, where the reader could not see it (a function of the
      // app's): every try would fail the same way, so never a 503.
      if (isReadOnlyError(error) && (await this.readOnlyByHandler(client))) {
        throw readOnlyByHandlerFailure(error);
      }
      // Refused for a reason that lasts (a privilege of the role the transaction began with):
      // nothing committed, and a retry meets the same refusal.
      const permanent = ownStatementFailure(error);
      if (permanent) {
        await this.rollbackOn(client);
        throw permanent;
      }
      // Refused by PostgreSQL itself at the COMMIT (a deferred constraint): all of it rolled
      // back, an uncommitted claim handed to it too (adversary 48c), which is then gone.
      if (
        this.claimState === 'held' &&
        isServerError(asError(error)) &&
        !isConnectionError(error)
      ) {
        this.claimState = 'erased';
      }
      // The commit's outcome is unknown: the connection goes, and PostgreSQL rolls back what
      // had not committed. The fenced statement's row lock orders any later takeover after it.
      this.end(client, error);
      throw error;
    }
  }

  /**
   * After the stored answer's statement was refused as a write in a read-only transaction:
   * rolls back, then asks the same session whether a transaction of its own would be read
   * only. A writable primary whose sessions begin read-write says the handler made the
   * request's transaction read only; a standby, or a session read only by default, is left to
   * the outage path (a failover may make it writable). Gives the connection back; never throws.
   */
  private async readOnlyByHandler(client: PoolClient): Promise<boolean> {
    if (this.claimState === 'held') this.claimState = 'erased';
    try {
      await queryWithDeadline(client, { text: 'ROLLBACK' }, this.timeoutMs);
      const { rows } = await queryWithDeadline(
        client,
        { text: READ_ONLY_BY_DEFAULT },
        this.timeoutMs,
      );
      this.end(client);
      const [session] = rows as { writable?: boolean }[];
      return session?.writable === true;
    } catch (error) {
      this.end(client, error);
      return false;
    }
  }

  /** Runs `work` in its scope: the data layer's statements made there join it. */
  inScope<R>(work: () => Promise<R>): Promise<R> {
    return transactionScope.run(this, work);
  }

  /** Rolls back (if a statement opened it) and gives the connection back. Never throws. */
  async rollback(): Promise<void> {
    if (this.state !== 'pending') {
      await this.ending;
      return;
    }
    this.state = 'ending';
    this.track(
      (async () => {
        const client = await this.opening?.catch(() => undefined);
        if (client) await this.rollbackOn(client);
        else this.state = 'ended';
      })(),
    );
    await this.ending;
  }

  private async rollbackOn(client: PoolClient): Promise<void> {
    // A claim handed to it (`handClaimTo`) goes back to the request, without its work.
    if (this.handedBy && this.claimState === 'held') return this.handBack(client);
    // Rolled back or dropped, its uncommitted claim is gone with it.
    if (this.claimState === 'held') this.claimState = 'erased';
    try {
      await queryWithDeadline(client, { text: 'ROLLBACK' }, this.timeoutMs);
      this.end(client);
    } catch (error) {
      this.end(client, error);
    }
  }

  /**
   * Rolls its work back to the savepoint after the claim it was handed (`handClaimTo`) and
   * hands the claim back on its connection: to the request, as if no phase had run.
   */
  private async handBack(client: PoolClient): Promise<void> {
    const by = this.handedBy!;
    this.handedBy = undefined;
    this.state = 'ended';
    try {
      await queryWithDeadline(
        client,
        { text: `ROLLBACK TO SAVEPOINT ${CLAIMED_SAVEPOINT}` },
        this.timeoutMs,
      );
    } catch (error) {
      // The connection goes, and the uncommitted claim with it.
      this.claimState = 'erased';
      by.settleHanded('erased');
      this.end(client, error);
      return;
    }
    // The connection is the request's again: it is not given back here.
    this.released = true;
    this.claimState = 'apart';
    await by.takeBack(client);
  }

  private end(client: PoolClient, error?: unknown): void {
    this.state = 'ended';
    this.settleHandedBy();
    // The handles stay usable: a statement of theirs after the end runs apart once the
    // request committed, or is refused.
    if (this.released) return;
    this.released = true;
    forgetCancelAsked(client);
    if (error === undefined && this.destroyAtEnd) {
      client.release(new Error('its code gave a client of the pool back to be destroyed'));
      return;
    }
    client.release(error === undefined ? undefined : asError(error));
  }

  /**
   * Its code gave a client of the pool back to be destroyed (`client.release(true)`, or with
   * an error): node-postgres' way to keep a session it changed (`SET statement_timeout` for a
   * bulk job) from later users of the pool. The request's connection stood for that client,
   * so it is destroyed at the end, not given back.
   */
  destroyAtEnd = false;

  /** Runs `work` once the transaction's end has an outcome, if it committed; else refuses. */
  protected async afterEnd<T>(work: () => Promise<T>): Promise<T> {
    refuseRetriedTry();
    await this.ending;
    if (!this.committed) throw new TransactionEndedError();
    return work();
  }

  /**
   * A statement that comes after its end (work the handler left running): once the end has an
   * outcome, it runs apart if the request committed, and is refused if it rolled back. One that
   * belongs to a nested transaction opened before the end (`nested`) is refused either way: its
   * savepoint committed with the request, and the rest of it cannot run in a transaction that
   * is gone.
   */
  protected async apart<T>(nested: boolean, work: () => Promise<T>): Promise<T> {
    if (!nested) return this.afterEnd(work);
    await this.ending;
    throw new TransactionEndedError(this.committed);
  }

  /**
   * Runs a statement of the library's own while its code may still run (a lease renewal, a
   * body stored by pointer, a message's id), with the role and search path the transaction
   * began with, and the code's own put back after it, in one round trip: nothing of the code's
   * runs between them, and a `SET LOCAL ROLE` of its own neither blocks the library's
   * statement nor is lifted for its next one. Undefined when nothing has begun the transaction
   * yet (nothing of the code's ran in it) or it ended: the caller's own path then applies.
   */
  protected async ownStatement(text: string, values: unknown[]): Promise<QueryResult | undefined> {
    if (!this.opening || !this.beginning || this.state !== 'pending') return undefined;
    const client = await this.opening;
    await this.beginning;
    if (this.state !== 'pending') return undefined;
    try {
      return await runSurrounded(
        client,
        { text, values },
        undefined,
        swapSessionState(this.begunState, this.libraryPath()),
      );
    } catch (error) {
      this.noteFailure(error);
      throw error;
    }
  }

  /** Marks the transaction as one that can only roll back; the error for its code. */
  protected refuse(
    refused: string | TransactionControlRefusedError,
  ): TransactionControlRefusedError {
    const error =
      typeof refused === 'string' ? new TransactionControlRefusedError(refused) : refused;
    this.refused = strongerRefusal(this.refused, error);
    this.refusalsGoTo?.refusedInPhase(error);
    return error;
  }

  /**
   * What refuses a statement of its code before it is sent, if anything (the request can then
   * only roll back): one that would end or start the transaction, or one that takes or
   * releases a session-level advisory lock, or sets the role or search path for the session:
   * neither ends with the request's transaction.
   */
  protected refusalOf(text: unknown): TransactionControlRefusedError | undefined {
    // A statement is checked where its code sends it and again where it reaches the
    // connection (the data layer's own `query`): once is enough for the same text.
    if (text === this.lastAllowed && text !== undefined) return undefined;
    const unreadable = unreadableOf(text);
    if (unreadable) return this.refuse(new UnreadableStatementRefusedError(unreadable));
    const control = transactionControlOf(text);
    if (control) return this.refuse(control);
    const lock = sessionAdvisoryLockOf(text);
    if (lock) return this.refuse(new SessionAdvisoryLockRefusedError(lock));
    const setting = sessionSettingOf(text);
    if (setting) return this.refuse(new SessionSettingRefusedError(setting));
    this.lastAllowed = text;
    return undefined;
  }

  /** The text `refusalOf` last let through. */
  private lastAllowed: unknown;

  /** The level the transaction is to begin at, as far as is known before it begins. */
  protected plannedLevel(): IsolationLevel | undefined {
    return this.askedLevel() ?? this.serverLevel;
  }

  /**
   * The level the route or the data layer asks for, if any. A level asked by a nested
   * transaction before the `BEGIN` replaces the server's default, as `BEGIN ISOLATION LEVEL`
   * does, rather than being weighed against it.
   */
  private askedLevel(): IsolationLevel | undefined {
    const configured = this.configuredLevel();
    return this.isolationLevel ?? (isIsolationLevel(configured) ? configured : undefined);
  }

  /**
   * A nested transaction asks for `level`: before the `BEGIN` went out, the request's
   * transaction begins at it (or stronger); after, it must already be at least as strong.
   * Refused (nothing sent) otherwise, never run weaker than asked.
   */
  protected async askIsolation(level: string | undefined): Promise<void> {
    if (level === undefined) return;
    const decide = async () =>
      decideIsolation(
        level,
        this.beginning
          ? { begun: true, current: await this.currentLevel() }
          : { begun: false, planned: this.askedLevel() },
      );
    let decision = await decide();
    if (decision.kind === 'refuse' && this.claimState === 'held' && !this.codeTouched) {
      // Only the claim ran in it: committed alone, the transaction begins anew at that level.
      await this.commitClaimAlone();
      decision = await decide();
    }
    if (decision.kind === 'refuse') throw new IsolationLevelRefusedError(decision.reason);
    if (decision.kind === 'begin-at') this.isolationLevel = decision.level;
  }

  /** The level the transaction runs at: the one sent with `BEGIN`, else the server's. */
  private async currentLevel(): Promise<IsolationLevel> {
    if (this.begunAt) return this.begunAt;
    const client = await this.opening!;
    await this.beginning;
    const { rows } = await withDeadline(
      client.query<{ level: string }>(
        withLibraryTypes({ text: `SELECT current_setting('transaction_isolation') AS level` }),
      ),
      this.timeoutMs,
      'reading the isolation level',
    );
    const level = rows[0].level.toUpperCase();
    this.begunAt = isIsolationLevel(level) ? level : 'READ COMMITTED';
    return this.begunAt;
  }

  /** Its request's atomic phases running now (`duringPhase`). */
  private phasesRunning = 0;

  /** How many of its request's atomic phases run now (a job's moves are refused meanwhile). */
  get phasesRunningNow(): number {
    return this.phasesRunning;
  }

  /**
   * Runs a phase of its request (its work and commit, in a transaction of its own). While it
   * runs, a statement of the request's own is refused (`connection()`): it would begin this
   * transaction and hold its locks to the request's answer, where the phase may wait on them
   * and the handler on the phase, for ever.
   */
  async duringPhase<T>(phase: () => Promise<T>): Promise<T> {
    this.phasesRunning++;
    try {
      return await phase();
    } finally {
      this.phasesRunning--;
    }
  }

  /**
   * A statement of its code while one of its request's phases runs: refused (see
   * `duringPhase`). Checked where its code sends it, before a data layer's own error handling
   * can wrap the refusal (TypeORM's `QueryFailedError`), and again at `connection()`.
   */
  protected refuseBesidePhase(): void {
    if (this.phasesRunning > 0) throw this.refuse(new StatementBesidePhaseRefusedError());
  }

  /** The connection, on the first statement; bounded like every wait here. */
  protected connection(): Promise<PoolClient> {
    if (this.ended) return Promise.reject(new TransactionEndedError());
    if (inRetriedTry()) return Promise.reject(new RetriedTryStatementError());
    if (this.phasesRunning > 0) {
      return Promise.reject(this.refuse(new StatementBesidePhaseRefusedError()));
    }
    this.codeTouched = true;
    this.opening ??= acquire(this.pool(), this.timeoutMs);
    return this.opening;
  }

  /**
   * Sends a statement of its code on the request's connection. It is refused if it would end
   * or start the transaction; one sent while the first is on its way waits for its `BEGIN`;
   * one sent after the end runs apart once the request committed (`nested`: one of a nested
   * transaction, refused then). The first carries the `BEGIN` in its own round trip when it
   * can (`beginWith`).
   */
  protected send(client: PoolClient, args: unknown[], nested: () => boolean): Promise<unknown> {
    return this.sendNow(client, args, nested);
  }

  /**
   * Its code's statements sent on the request's connection and not done yet: the library's
   * own statements at its end (the stored answer, `COMMIT`) wait for them before their
   * deadline starts (see `codeStatementsDone`).
   */
  private readonly codeStatements = new Set<Promise<unknown>>();

  /**
   * Noted once handed to node-postgres (on the connection's queue, ahead of what the library
   * sends next), never when its code calls: one still waiting for the `BEGIN` may yet run apart
   * after the end (`apart`), which waits for the commit: waited for by the commit, it would
   * wait for ever (adversary 81).
   */
  private runningOnConnection<T>(sent: Promise<T>, client: PoolClient): Promise<T> {
    // Given up on by node-postgres' read timeout (`query_timeout`), it still runs on the
    // server as the client's active query: done at the client's next ReadyForQuery, not at
    // the rejection (adversary 82).
    this.noteRunning(
      sent.then(
        () => undefined,
        (error: unknown) => (stillRunningAfter(error) ? readyForNext(client) : undefined),
      ),
    );
    return sent;
  }

  /** `done` (never rejecting) counted among its code's statements until it settles. */
  private noteRunning(done: Promise<void>): void {
    this.codeStatements.add(done);
    void done.then(() => {
      this.codeStatements.delete(done);
      if (this.codeStatements.size === 0) this.runWhenCodeStatementsDone();
    });
  }

  /** Whether a statement of its code runs on the request's connection now (`codeStatements`). */
  protected get codeStatementsRunning(): boolean {
    return this.codeStatements.size > 0;
  }

  /** What waits for its code's statements still running (see `afterCodeStatements`). */
  private whenCodeStatementsDone: (() => void)[] = [];

  private runWhenCodeStatementsDone(): void {
    for (const then of this.whenCodeStatementsDone.splice(0)) then();
  }

  /**
   * Runs `then` once its code's statements still running on the request's connection are done
   * (now, if none is), before the stored answer and `COMMIT` are sent behind them. The
   * request's heartbeat stops so: the wait is the handler's time, and a lease left to run out
   * during it would let a retry take the key over and run the handler again (adversary 81).
   */
  afterCodeStatements(then: () => void): void {
    if (this.codeStatements.size === 0) then();
    else this.whenCodeStatementsDone.push(then);
  }

  /**
   * Waits for its code's statements still running on the request's connection: one its code
   * gave up on (Kysely's default `'ignore query'` abort rejects the handler's promise and leaves
   * the statement running) or left running unawaited. The library cannot tell them apart, and
   * cannot stop one without aborting the request's transaction (a cancel ends the transaction,
   * not the statement alone): it runs to its end, as it would without the library, and what
   * it wrote commits with the answer. Its time is the handler's, bounded as its statements are
   * (`statement_timeout`), never counted against `databaseTimeoutMs`: sent behind it, the
   * stored answer and `COMMIT` met that deadline, and every try answered 503 for a statement
   * of the handler's, no outage.
   */
  private async codeStatementsDone(): Promise<void> {
    while (this.codeStatements.size > 0) await Promise.all([...this.codeStatements]);
  }

  private sendNow(client: PoolClient, args: unknown[], nested: () => boolean): Promise<unknown> {
    const refused = this.refusalOf(textOf(args[0]));
    if (refused) return Promise.reject(refused);
    // Past the end: once the request committed, on a connection of its own; a stream too
    // (`sentAfterEnd`), refused only after a rollback.
    const apart = () =>
      isSubmittable(args[0])
        ? (this.sentAfterEnd(nested(), args) as Promise<unknown>)
        : this.apart(nested(), () => this.sendAlone(args, true));
    if (this.ended) return apart();
    const query = client.query as (...a: unknown[]) => Promise<unknown>;
    if (isSubmittable(args[0])) {
      // A stream (a cursor, a `pg.Query`): handed back as it is, not as a promise, and
      // submitted once the BEGIN has succeeded, never before. node-postgres runs a submittable
      // the moment it is handed one, so given now it would run ahead of a BEGIN still on its
      // way (in autocommit, surviving the request's rollback), or after a BEGIN that failed.
      const submittable = args[0] as { handleError?: (error: unknown) => void };
      this.begin(client).then(
        () =>
          this.withdrawn(submittable)
            ? undefined
            : this.ended
              ? submittable.handleError?.(new TransactionEndedError(nested()))
              : this.handOver(client, args),
        (error: unknown) => submittable.handleError?.(error),
      );
      return submittable as unknown as Promise<unknown>;
    }
    // A statement sent while the first is on its way waits for its BEGIN, and is refused if
    // the transaction ended meanwhile: it must never run after the ROLLBACK or COMMIT, nor
    // outside the transaction when BEGIN failed.
    const after = () =>
      this.ended ? apart() : this.runningOnConnection(query.apply(client, args), client);
    if (this.beginning) return this.beginning.then(after);
    const carried = this.waitsBeforeBegin() ? undefined : carriedStatement(args);
    if (carried) {
      const { result, begun } = beginWith(
        client,
        this.beginText(),
        carried,
        [],
        (readOnly, fields) => {
          this.beganReadOnly = readOnly;
          this.begunState = begunStateOf(fields);
        },
      );
      this.beginning = begun;
      return this.runningOnConnection(result, client);
    }
    return this.begin(client).then(after);
  }

  /**
   * A submittable of its code handed to the connection. One that runs to its end by itself (a
   * `pg.Query` left running: `runsToItsEnd`) counts among its code's statements until
   * node-postgres tells it ended (not at its read timeout: `endOf`): the stored answer and
   * `COMMIT`, queued behind it, wait for it before their deadline starts, as for a statement
   * left running (adversaries 82, 83).
   */
  private handOver(client: PoolClient, args: unknown[]): unknown {
    if (runsToItsEnd(args[0])) this.noteRunning(endOf(args[0] as object, client));
    return (client.query as (...a: unknown[]) => unknown).apply(client, args);
  }

  /**
   * Whether a submittable its code handed over was withdrawn before it could be submitted (a
   * cursor closed before it was): it is then never handed to the connection. Else it is about
   * to be.
   */
  protected withdrawn(_submittable: object): boolean {
    return false;
  }

  /** `BEGIN` in a round trip of its own: for a first statement `beginWith` cannot carry. */
  protected begin(client: PoolClient): Promise<void> {
    if (this.ended && !this.beginning) return Promise.reject(new TransactionEndedError());
    this.beginning ??= (
      this.waitsBeforeBegin()
        ? this.beforeIsolatedBegin!().then(
            () => undefined,
            () => undefined,
          )
        : Promise.resolve()
    )
      .then(() =>
        withDeadline(
          // The session's state kept with it, as `beginWith` does (see `session-state.ts`);
          // above READ COMMITTED, the claim's row held by the transaction (`holdAtBegin`).
          client.query(
            withLibraryTypes({
              text: [this.beginText(), CAPTURE_SESSION_STATE, this.heldAtBegin(client)]
                .filter(Boolean)
                .join('; '),
            }),
          ),
          this.timeoutMs,
          'BEGIN',
        ),
      )
      .then((results: unknown) => {
        const captured = (results as { rows?: { read_only?: string }[] }[])[1]?.rows?.[0];
        this.beganReadOnly = captured?.read_only === 'on';
        this.begunState = begunStateOf(captured);
      });
    return this.beginning;
  }

  private heldAtBegin(client: PoolClient): string | undefined {
    if (!this.holdAtBegin || !this.waitsBeforeBegin()) return undefined;
    return this.holdAtBegin((value) => client.escapeLiteral(value));
  }

  private beginText(): string {
    // The data layer's option is sent as it is: a level PostgreSQL refuses fails the BEGIN.
    // Else the server's default as read at start-up, named: the level the library plans for
    // (renewals inside the transaction above READ COMMITTED, or apart below) is then the one
    // the transaction has, even on a connection whose default changed since (an ALTER
    // DATABASE while the app runs takes effect at its restart).
    const isolation = this.isolationLevel ?? this.configuredLevel() ?? this.serverLevel;
    this.begunAt = isIsolationLevel(isolation) ? isolation : undefined;
    return isolation ? `BEGIN ISOLATION LEVEL ${isolation}` : 'BEGIN';
  }

  /**
   * A statement of its code's client sent after the end (work the handler left running), in
   * the form it was sent in (`answered`): once the end has an outcome, on a connection of its
   * own if the request committed (`apart`: refused after a rollback, or inside a nested
   * transaction the end cut short). A submittable (a cursor, a stream) is handed back at once
   * and handed to that connection, which goes back to the pool once it ended.
   */
  protected sentAfterEnd(nested: boolean, args: unknown[]): unknown {
    if (!isSubmittable(args[0])) {
      return answered(args, (own) => this.apart(nested, () => this.sendAlone(own, true)));
    }
    const submittable = args[0] as { handleError?: (error: unknown) => void };
    this.apart(nested, () => acquire(this.pool(), 'as-the-pool')).then(
      (client) => {
        void endOf(submittable, client).then(() => client.release());
        (client.query as (...a: unknown[]) => unknown).apply(client, args);
      },
      (error: unknown) => submittable.handleError?.(error),
    );
    return submittable;
  }

  /**
   * One statement on a pooled connection of its own, outside any transaction. `apart`: the
   * app's own, sent after the request ended (work its handler left running), which waits for a
   * connection as it would without the library, in the pool's queue: under the library's
   * deadline it was lost when the pool was busy (a crowd of deliveries), where the app's pool
   * would have run it a moment later.
   */
  protected async sendAlone(args: unknown[], apart = false): Promise<unknown> {
    const client = await acquire(this.pool(), apart ? 'as-the-pool' : this.timeoutMs);
    try {
      const result = await (client.query as (...a: unknown[]) => Promise<unknown>).apply(
        client,
        args,
      );
      client.release();
      return result;
    } catch (error) {
      client.release(asError(error));
      throw error;
    }
  }
}

/** The SQL text of a statement as node-postgres takes it: a string, or a config's `text`. */
export function textOf(statement: unknown): unknown {
  if (typeof statement === 'string') return statement;
  const config = statement as { text?: unknown; cursor?: { text?: unknown } } | null;
  // pg-query-stream keeps its text on the cursor it wraps (TypeORM's runner.stream() uses it).
  return config?.text ?? config?.cursor?.text;
}

/** The parameters sent with a statement: `(text, values)`, or a config's `values`. */
export function valuesOf(args: readonly unknown[]): readonly unknown[] | undefined {
  if (Array.isArray(args[1])) return args[1] as unknown[];
  const values = (args[0] as { values?: unknown } | null | undefined)?.values;
  return Array.isArray(values) ? (values as unknown[]) : undefined;
}

export function isSubmittable(value: unknown): boolean {
  return typeof (value as { submit?: unknown } | null)?.submit === 'function';
}

export function asError(error: unknown): Error {
  return error instanceof Error ? error : new Error(String(error));
}

/** dblink's context line (`while executing command on unnamed dblink connection`), postgres_fdw's. */
const REMOTE_CONTEXT = /^(while .* on (unnamed )?dblink connection|remote SQL command: )/;

/**
 * Whether a database error was passed on from another server (dblink, postgres_fdw), by the
 * context PostgreSQL gives it: a remote read only for a while (a standby in a failover) is an
 * outage to retry, whatever this transaction's own mode.
 */
function isRemote(error: unknown): boolean {
  // Its own context, or that of the driver's error a data layer wraps (TypeORM's
  // `driverError`, Drizzle's `cause`): a line of its own as dblink and postgres_fdw write it
  // (never a line quoting a local function's name or statement, which begin otherwise).
  return [error, fieldOf(error, 'driverError'), fieldOf(error, 'cause')]
    .map((candidate) => String(fieldOf(candidate, 'where') ?? ''))
    .join('\n')
    .split('\n')
    .some((line) => REMOTE_CONTEXT.test(line));
}

function fieldOf(value: unknown, key: string): unknown {
  return typeof value === 'object' && value !== null
    ? (value as Record<string, unknown>)[key]
    : undefined;
}
