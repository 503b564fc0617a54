import { type QueryResult, type QueryResultRow } from 'pg';
import { type EntityManager } from 'typeorm';
import { type ExistingKey, type Fence } from '../decisions/decide.js';
import { START_RECOVERY_POINT } from '../shapes/idempotency.constants.js';
import { type ActiveClaim } from '../shapes/active-claim.js';
import {
  IdempotencyLeaseLostError,
  IdempotencyStoreUnavailableError,
} from '../shapes/idempotency.errors.js';
import { type StoredResponse } from '../shapes/stored-response.js';
import { type StoreTransaction } from '../shapes/store-transaction.js';
import { type StoreDatabase, type Statement } from '../shapes/store-database.js';
import { rethrowExplained } from './partitioned/layout-errors.js';
import {
  type ClaimDeadline,
  ClaimBatcher,
  type ClaimRequest,
  MAX_CLAIM_BATCH,
  idOf,
  isRolledBack,
} from './claim-batcher.js';
import { DatabaseDeadlineError } from '../connection/connection-errors.js';
import { followedBy } from './lease-renewals.js';
import {
  ADVANCE,
  CLAIM,
  CLAIM_BATCH,
  COMPLETE,
  COMPLETE_ANSWER,
  COMPLETE_HELD,
  EXTEND_LEASE,
  keyLock,
  OLDEST_UNFINISHED,
  PURGE_ABANDONED_BATCH,
  PURGE_BATCH,
  RELEASE,
  TAKE_OVER,
} from './postgres-statements.js';
import {
  type ClaimInOutcome,
  type ClaimOutcome,
  type KeyScope,
  type TransactionalClaimStore,
} from '../shapes/claim-store.interface.js';
import { phaseResultsRead, phaseResultText } from './phase-result-json.js';

/** A row of CLAIM (and of the partitioned table's `idempotency_claim()`, which has its columns). */
export interface ClaimRow {
  claimed: boolean;
  claim_id: string;
  lock_version: string;
  fingerprint: Buffer | null;
  state: 'started' | 'done' | null;
  lease_expired: boolean | null;
  lease_seconds_left: number | null;
  response_code: number | null;
  response_body: Buffer | null;
  response_headers: Record<string, string> | null;
  finished_age_ms: number | null;
}

interface TakeOverRow {
  claim_id: string;
  lock_version: string;
  recovery_point: string;
  phase_results: Record<string, unknown>;
}

/** How often a claim is re-run when its conflicting row was committed after its snapshot. */
const CLAIM_ATTEMPTS = 3;

/**
 * The claim store in the app's own PostgreSQL (the default): the `idempotency_keys` table of
 * the design, reached through the app's pool. Its finish and phases commit in the request's
 * transaction, with the handler's effects.
 */
export class PostgresClaimStore implements TransactionalClaimStore {
  readonly transactional = true;

  /** Claims (and the reads of replays) that arrive while one is on its way go together. */
  readonly batcher = new ClaimBatcher<ClaimRow | undefined>(
    (batch, late) => this.sendClaims(batch, late),
    MAX_CLAIM_BATCH,
    (request, row) => this.giveBackLate(request, row),
  );

  /**
   * Keys this process is giving back after a late claim or takeover (see `giveBack`): a claim
   * of one waits for it, or the client's retry, sent at once after its 503, would meet the
   * late row still held and be told 409 for nothing running.
   */
  private readonly givingBack = new Map<string, Promise<void>>();

  constructor(protected readonly database: StoreDatabase) {}

  async claim(scope: KeyScope, fingerprint: Buffer, leaseMs: number): Promise<ClaimOutcome> {
    // The same key's claim answered 503 at its deadline, its statement still on its way, then
    // its give-back if it landed: the client's retry, sent at once, waits for both.
    const settling = this.batcher.settling(scope);
    if (settling) await settling;
    const givenBack = this.givingBack.get(idOf(scope));
    if (givenBack) await givenBack;
    // One deadline for the whole claim, from now: not one per batch it waits behind.
    const { timeoutMs } = this.database;
    const deadline: ClaimDeadline = {
      at: Date.now() + timeoutMs,
      error: () =>
        new IdempotencyStoreUnavailableError(
          new DatabaseDeadlineError(`claiming key ${scope.key}`, timeoutMs),
        ),
    };
    for (let attempt = 0; attempt < CLAIM_ATTEMPTS; attempt++) {
      let row: ClaimRow | undefined;
      try {
        row = await this.batcher
          .claim({ scope, fingerprint, leaseMs }, deadline)
          .catch(rethrowExplained);
      } catch (error) {
        // Rolled back (a database whose default isolation is SERIALIZABLE runs the claim so:
        // a row committed after its snapshot fails it with 40001, where READ COMMITTED finds
        // the row): run again, and it reads the row that won.
        if (attempt + 1 < CLAIM_ATTEMPTS && isRolledBack(error)) continue;
        throw error;
      }
      if (row) return claimOutcome(scope, row, leaseMs);
    }
    throw new IdempotencyStoreUnavailableError(
      new Error(`claim of key ${scope.key} found neither a free key nor a row`),
    );
  }

  async claimIn(
    scope: KeyScope,
    fingerprint: Buffer,
    leaseMs: number,
    transaction: StoreTransaction,
    waitMs: number,
  ): Promise<ClaimInOutcome> {
    await this.database.ready();
    // Above READ COMMITTED, the claim's and the stored answer's reads of the keys' table in
    // the request's transaction would make requests of unrelated keys fail to serialize (and
    // the partitioned table's claim refuses to run there): claimed apart, as by default.
    if (transaction.plannedAboveReadCommitted) return { kind: 'apart' };
    const statement = this.claimStatement();
    let rows: Record<string, unknown>[];
    try {
      // The key's lock first, waited for (bounded): the claims made apart only try it.
      rows = await transaction.beginWithClaim(
        (literal) =>
          `SELECT pg_advisory_xact_lock(${keyLock(`${literal(scope.tenantId)}::text`, `${literal(scope.key)}::text`)})`,
        (literal) => ({ ...statement, args: claimArguments(scope, fingerprint, leaseMs, literal) }),
        waitMs,
        leaseMs,
      );
    } catch (error) {
      // The claim of a request whose work is not committed yet outlasted the wait: its own
      // bound, or the session's `statement_timeout` where that is shorter.
      if (isLockOrStatementTimeout(error)) return { kind: 'held' };
      // Above READ COMMITTED, a row committed after its snapshot: claimed apart, it is read.
      if (isRolledBack(error)) return { kind: 'apart' };
      let explained = error;
      try {
        rethrowExplained(error);
      } catch (layout) {
        explained = layout;
      }
      throw this.database.failureOf(explained, 'claim');
    }
    const row = rows[0] as unknown as ClaimRow | undefined;
    if (row?.claimed) return claimOutcome(scope, row, leaseMs);
    // Not waited for: a replay costs the one round trip of its claim.
    void transaction.rollback();
    return row ? claimOutcome(scope, row, leaseMs) : { kind: 'apart' };
  }

  /** The statement of one claim (statements 1 and 2), as `claimIn` sends it. */
  protected claimStatement(): Statement {
    return CLAIM;
  }

  /**
   * A claim that landed after its request was answered 503 (at its deadline, or its
   * statement's): nobody runs its handler, so the key is given back at once (its retry claims
   * it anew), not left held until its lease runs out. A failure leaves the lease to run out.
   */
  private giveBackLate(request: ClaimRequest, row: ClaimRow | undefined): void {
    const claim = lateClaim(request, row);
    if (claim) this.giveBack(claim, true);
  }

  /** Releases a claim nobody runs; a failure leaves its lease to run out. */
  private giveBack(claim: ActiveClaim, forget: boolean): void {
    const id = idOf(claim);
    const released: Promise<void> = this.release(claim, forget)
      .catch(() => undefined)
      .finally(() => {
        if (this.givingBack.get(id) === released) this.givingBack.delete(id);
      });
    this.givingBack.set(id, released);
  }

  async takeOver(scope: KeyScope, fence: Fence, leaseMs: number) {
    const claimOf = (row: TakeOverRow): ActiveClaim => ({
      ...scope,
      claimId: row.claim_id,
      lockVersion: row.lock_version,
      recoveryPoint: row.recovery_point,
      phaseResults: phaseResultsRead(row.phase_results),
      leaseMs,
    });
    const { rows } = await this.query<TakeOverRow>(
      TAKE_OVER,
      [scope.tenantId, scope.key, fence.lockVersion, fence.claimId, leaseMs],
      // Taken over as its caller was answered 503 at the statement's deadline: nobody runs
      // it. Its lease is ended at once (fenced by the row's new lock version; its claim id
      // and phases kept, as a taken-over key is never forgotten), so that the retry resumes
      // it instead of meeting 409s until the lease runs out.
      (late) => {
        const row = late.rows[0];
        if (row) this.giveBack(claimOf(row), false);
      },
    );
    return rows.length === 0 ? undefined : claimOf(rows[0]);
  }

  async finish(claim: ActiveClaim, response: StoredResponse): Promise<boolean> {
    const { name, text, values } = completeOf(claim, response);
    const { rowCount } = await this.query({ name, text }, values);
    return rowCount === 1;
  }

  finishIn(
    claim: ActiveClaim,
    response: StoredResponse,
    transaction: StoreTransaction,
  ): Promise<boolean> {
    return transaction.commitWith(completeOf(claim, response));
  }

  async completeAnswer(claim: ActiveClaim, response: StoredResponse): Promise<boolean> {
    const { rowCount } = await this.query(COMPLETE_ANSWER, completeValues(claim, response));
    return rowCount === 1;
  }

  async release(claim: ActiveClaim, forget: boolean): Promise<void> {
    await this.query(RELEASE, [...fenceOf(claim), forget]);
  }

  async purgeBatch(retentionMs: number, batchSize: number): Promise<KeyScope[]> {
    const { rows } = await this.query<{ tenant_id: string; key: string }>(PURGE_BATCH, [
      retentionMs,
      batchSize,
    ]);
    return rows.map((row) => ({ tenantId: row.tenant_id, key: row.key }));
  }

  async purgeAbandonedBatch(horizonMs: number, batchSize: number): Promise<number> {
    const { rowCount } = await this.query(PURGE_ABANDONED_BATCH, [horizonMs, batchSize]);
    return rowCount ?? 0;
  }

  async oldestUnfinishedAgeMs(): Promise<number | undefined> {
    const { rows } = await this.query<{ age_ms: number | null }>(OLDEST_UNFINISHED, []);
    return rows[0]?.age_ms ?? undefined;
  }

  async extendLease(claim: ActiveClaim): Promise<boolean> {
    const { rowCount } = await this.query(EXTEND_LEASE, [...fenceOf(claim), claim.leaseMs]);
    return rowCount === 1;
  }

  holdLeaseText(claim: ActiveClaim, literal: (value: string) => string): string {
    const values = [
      literal(claim.tenantId),
      literal(claim.key),
      // Numbers from the database, checked as such before they become text of a statement.
      BigInt(claim.lockVersion).toString(),
      literal(claim.claimId),
      Math.trunc(claim.leaseMs).toString(),
    ];
    return EXTEND_LEASE.text.replace(/\$(\d)/g, (_, n: string) => values[Number(n) - 1]);
  }

  async extendLeaseIn(claim: ActiveClaim, transaction: StoreTransaction): Promise<boolean> {
    const rows = await transaction.query(`${EXTEND_LEASE.text} RETURNING 1`, [
      ...fenceOf(claim),
      claim.leaseMs,
    ]);
    return rows.length === 1;
  }

  async commitPhase<T>(
    claim: ActiveClaim,
    phase: string,
    work: (manager: EntityManager) => Promise<T>,
    holder?: StoreTransaction,
  ): Promise<T> {
    const transaction = this.database.transaction(true);
    // Above READ COMMITTED (the data layer's level, or one its work asks for), the claim's
    // heartbeat must not commit a renewal apart after the phase's snapshot, or the fenced
    // update below would fail to serialize on every try: it renews inside the phase instead.
    const unfollow = followedBy(claim, transaction);
    // The claim not committed yet (`oneCommit`): the phase's work runs after it, in its
    // transaction, and commits with it; the heartbeat renews inside it (`renewsInside`).
    const handed = holder?.handClaimTo?.(transaction) ?? true;
    try {
      // Its recovery point could not be written on a row the phase cannot see.
      if (!handed) throw new Error(`phase "${phase}": the uncommitted claim could not join it`);
      // Code of the phase that reaches the DataSource its own way (an injected repository)
      // joins the phase's transaction too.
      const value = await transaction
        .inScope(() => work(transaction.manager))
        .catch((error: unknown) => {
          throw transaction.failureOf(error);
        });
      // Fenced last: the row lock it takes is held only for the commit, not the phase's work.
      const advanced = await transaction.commitWith({
        ...ADVANCE,
        values: [...fenceOf(claim), phase, phaseResultText(value), claim.leaseMs],
      });
      if (!advanced) throw new IdempotencyLeaseLostError();
      return value;
    } finally {
      await transaction.rollback();
      unfollow();
    }
  }

  protected query<R extends QueryResultRow>(
    statement: Statement,
    values: unknown[],
    late?: (result: QueryResult<R>) => void,
  ) {
    return this.database.query<R>(statement, values, late);
  }

  /**
   * One statement for a batch of claims; each claim's row, or undefined where none came. Rows
   * that come after the statement's deadline go to `late` (see `ClaimBatcher`).
   */
  protected sendClaims(batch: ClaimRequest[], late: LateRows): Promise<(ClaimRow | undefined)[]> {
    return this.claimRows(batch, CLAIM, CLAIM_BATCH, late);
  }

  /**
   * A lone claim goes as `one`, the statement of a single claim (an idle process sends what it
   * always sent); a batch as `many`, its claims as arrays, each row back with its place. Its
   * answer after its deadline goes to `late`, in the same places.
   */
  protected async claimRows(
    batch: ClaimRequest[],
    one: Statement,
    many: Statement,
    late: LateRows,
  ): Promise<(ClaimRow | undefined)[]> {
    if (batch.length === 1) {
      const [{ scope, fingerprint, leaseMs }] = batch;
      const { rows } = await this.query<ClaimRow>(
        one,
        [scope.tenantId, scope.key, fingerprint, leaseMs],
        (result) => late([result.rows[0]]),
      );
      return [rows[0]];
    }
    const byPlace = ({ rows }: QueryResult<ClaimRow & { i: string }>) => {
      const placed = new Array<ClaimRow | undefined>(batch.length).fill(undefined);
      for (const row of rows) placed[Number(row.i) - 1] = row;
      return placed;
    };
    const result = await this.query<ClaimRow & { i: string }>(
      many,
      [
        batch.map((claim) => claim.scope.tenantId),
        batch.map((claim) => claim.scope.key),
        batch.map((claim) => claim.fingerprint),
        batch.map((claim) => claim.leaseMs),
      ],
      (answer) => late(byPlace(answer)),
    );
    return byPlace(result);
  }
}

/**
 * A claim's parameters as SQL literals (for a round trip of several statements, which takes
 * no parameters), quoted by `literal`: tenant and key as text, the fingerprint as bytea, the
 * lease as a number checked to be one.
 */
export function claimArguments(
  scope: KeyScope,
  fingerprint: Buffer,
  leaseMs: number,
  literal: (value: string) => string,
): string[] {
  return [
    `${literal(scope.tenantId)}::text`,
    `${literal(scope.key)}::text`,
    `${literal(`\\x${fingerprint.toString('hex')}`)}::bytea`,
    `${Number(Math.trunc(leaseMs)).toString()}::float8`,
  ];
}

/** A wait that ran past `lock_timeout` (55P03) or `statement_timeout` (57014). */
function isLockOrStatementTimeout(error: unknown): boolean {
  const code = (error as { code?: unknown } | null)?.code;
  return code === '55P03' || code === '57014';
}

/** The parameters of statement 5, for the plain finish and the last phase alike. */
function completeValues(claim: ActiveClaim, response: StoredResponse): unknown[] {
  return [...fenceOf(claim), response.status, response.body, response.headers];
}

/** Statement 5 for `claim`: with its hold where it has one (see `finishedAtLeastMs`). */
function completeOf(
  claim: ActiveClaim,
  response: StoredResponse,
): { name: string; text: string; values: unknown[] } {
  const values = completeValues(claim, response);
  return claim.finishedAtLeastMs === undefined
    ? { ...COMPLETE, values }
    : { ...COMPLETE_HELD, values: [...values, claim.finishedAtLeastMs] };
}

/** The first four parameters of every fenced statement: the key, then the fencing token. */
function fenceOf(claim: ActiveClaim): [string, string, string, string] {
  return [claim.tenantId, claim.key, claim.lockVersion, claim.claimId];
}

/**
 * The claim to give back for a row that came after its request was answered 503: the key this
 * very claim inserted, fenced by the row's own (`lock_version`, `claim_id`), so that a give-back
 * can never touch a claim made since by another request (a retry). A row it found instead (a
 * key held or finished by another request) and a claim with no row are left alone.
 */
export function lateClaim(
  { scope, leaseMs }: ClaimRequest,
  row: ClaimRow | undefined,
): ActiveClaim | undefined {
  const outcome = row && claimOutcome(scope, row, leaseMs);
  return outcome?.kind === 'claimed' ? outcome.claim : undefined;
}

/** Rows of a claim statement that answered after its deadline, in its batch's places. */
export type LateRows = (rows: (ClaimRow | undefined)[]) => void;

/** A claim's row as its outcome: this worker owns the key, or the record that is there. */
export function claimOutcome(scope: KeyScope, row: ClaimRow, leaseMs: number): ClaimOutcome {
  if (!row.claimed) return { kind: 'existing', existing: toExistingKey(row) };
  return {
    kind: 'claimed',
    claim: {
      ...scope,
      claimId: row.claim_id,
      lockVersion: row.lock_version,
      recoveryPoint: START_RECOVERY_POINT,
      phaseResults: {},
      leaseMs,
    },
  };
}

function toExistingKey(row: ClaimRow): ExistingKey {
  const fingerprint = row.fingerprint ?? Buffer.alloc(0);
  if (row.state === 'done') {
    return {
      state: 'done',
      fingerprint,
      response: {
        status: row.response_code ?? 500,
        headers: row.response_headers ?? {},
        body: row.response_body ?? Buffer.alloc(0),
      },
      finishedAgeMs: row.finished_age_ms ?? Number.POSITIVE_INFINITY,
    };
  }
  return {
    state: 'started',
    fingerprint,
    leaseExpired: row.lease_expired ?? true,
    leaseSecondsLeft: row.lease_seconds_left ?? 0,
    // No lease at all: RELEASE ended it (a lease that ran out still has its end).
    released: row.lease_seconds_left === null,
    fence: { lockVersion: row.lock_version, claimId: row.claim_id },
  };
}
