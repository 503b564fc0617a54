import { Logger } from '@nestjs/common';
import { type Pool, type QueryConfig, type QueryResult, type QueryResultRow } from 'pg';
import { type DataSource, type EntityManager } from 'typeorm';
import { type ExistingKey, type Fence } from '../decide.js';
import { START_RECOVERY_POINT } from '../idempotency.constants.js';
import { type ActiveClaim } from '../idempotency-context.js';
import {
  IdempotencyLeaseLostError,
  IdempotencyStoreUnavailableError,
  IdempotencyStoredResponseUnreadableError,
} from '../idempotency.errors.js';
import { type ResponseSealer, SEALED_MARKER, SealedResponseError } from './response-sealer.js';
import { type StoredResponse } from '../stored-response.js';
import { LazyTransaction } from '../transaction/lazy-transaction.js';
import { transactionScope } from '../transaction/transaction-scope.js';
import { acquire, queryWithDeadline } from './deadline.js';
import {
  ADVANCE,
  CLAIM,
  COMPLETE,
  EXTEND_LEASE,
  PURGE_ABANDONED_BATCH,
  PURGE_BATCH,
  PURGE_PROCESSED_BATCH,
  OLDEST_UNFINISHED,
  PURGE_MESSAGE_FAILURES_BATCH,
  RECORD_MESSAGE_FAILURE,
  RELEASE,
  TAKE_OVER,
} from './postgres-statements.js';
import {
  type ClaimOutcome,
  type IdempotencyStore,
  type KeyScope,
} from './idempotency-store.interface.js';

interface ClaimRow {
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
 * The store on PostgreSQL, through the pg pool of the app's own TypeORM DataSource. The hot
 * path speaks to pg directly rather than through TypeORM's query runner: one prepared
 * statement per step and no ORM hydration, which is where a request's CPU went.
 */
export class PostgresIdempotencyStore implements IdempotencyStore {
  private readonly logger = new Logger('Idempotency');

  constructor(
    private readonly dataSource: () => DataSource,
    private readonly timeoutMs: number,
    /** Seals stored responses (encryption at rest), when the app configured keys. */
    private readonly sealer?: ResponseSealer,
  ) {}

  async claim(scope: KeyScope, fingerprint: Buffer, leaseMs: number): Promise<ClaimOutcome> {
    const values = [scope.tenantId, scope.key, fingerprint, leaseMs];
    for (let attempt = 0; attempt < CLAIM_ATTEMPTS; attempt++) {
      const { rows } = await this.query<ClaimRow>(CLAIM, values);
      if (rows.length === 0) continue;
      const row = rows[0];
      if (row.claimed) {
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
      return { kind: 'existing', existing: this.opened(scope, toExistingKey(row)) };
    }
    throw new IdempotencyStoreUnavailableError(
      new Error(`claim of key ${scope.key} found neither a free key nor a row`),
    );
  }

  async takeOver(scope: KeyScope, fence: Fence, leaseMs: number) {
    const { rows } = await this.query<TakeOverRow>(TAKE_OVER, [
      scope.tenantId,
      scope.key,
      fence.lockVersion,
      fence.claimId,
      leaseMs,
    ]);
    if (rows.length === 0) return undefined;
    const row = rows[0];
    return {
      ...scope,
      claimId: row.claim_id,
      lockVersion: row.lock_version,
      recoveryPoint: row.recovery_point,
      phaseResults: row.phase_results,
      leaseMs,
    } satisfies ActiveClaim;
  }

  async complete(
    claim: ActiveClaim,
    response: StoredResponse,
    transaction?: LazyTransaction,
  ): Promise<boolean> {
    const stored = this.sealer ? this.sealer.seal(claim, response) : response;
    if (!transaction) {
      const { rowCount } = await this.query(COMPLETE, completeValues(claim, stored));
      return rowCount === 1;
    }
    return transaction.commitWith({ ...COMPLETE, values: completeValues(claim, stored) });
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

  async purgeProcessedBatch(retentionMs: number, batchSize: number): Promise<number> {
    const { rowCount } = await this.query(PURGE_PROCESSED_BATCH, [retentionMs, batchSize]);
    return rowCount ?? 0;
  }

  async purgeMessageFailuresBatch(retentionMs: number, batchSize: number): Promise<number> {
    const { rowCount } = await this.query(PURGE_MESSAGE_FAILURES_BATCH, [retentionMs, batchSize]);
    return rowCount ?? 0;
  }

  async recordMessageFailure(consumer: string, messageId: string, error: string): Promise<number> {
    const { rows } = await this.query<{ attempts: number }>(RECORD_MESSAGE_FAILURE, [
      consumer,
      messageId,
      error.slice(0, 1000),
    ]);
    return rows[0].attempts;
  }

  async oldestUnfinishedAgeMs(): Promise<number | undefined> {
    const { rows } = await this.query<{ age_ms: number | null }>(OLDEST_UNFINISHED, []);
    return rows[0]?.age_ms ?? undefined;
  }

  async extendLease(claim: ActiveClaim): Promise<boolean> {
    const { rowCount } = await this.query(EXTEND_LEASE, [...fenceOf(claim), claim.leaseMs]);
    return rowCount === 1;
  }

  async commitPhase<T>(
    claim: ActiveClaim,
    phase: string,
    work: (manager: EntityManager) => Promise<T>,
  ): Promise<T> {
    const transaction = this.transaction(true);
    try {
      // Code of the phase that reaches the DataSource its own way (an injected repository)
      // joins the phase's transaction too.
      const value = await transactionScope.run(transaction, () => work(transaction.manager));
      // Fenced last: the row lock it takes is held only for the commit, not the phase's work.
      const advanced = await transaction.commitWith({
        ...ADVANCE,
        values: [
          ...fenceOf(claim),
          phase,
          JSON.stringify(value === undefined ? null : value),
          claim.leaseMs,
        ],
      });
      if (!advanced) throw new IdempotencyLeaseLostError();
      return value;
    } finally {
      await transaction.rollback();
    }
  }

  transaction(joinable: boolean): LazyTransaction {
    return new LazyTransaction(this.dataSource(), () => this.pool, this.timeoutMs, joinable);
  }

  runInTransaction<T>(work: (manager: EntityManager) => Promise<T>): Promise<T> {
    return this.dataSource().transaction(work);
  }

  /** A finished key's response as it went out: opened, if it was stored sealed. */
  private opened(scope: KeyScope, existing: ExistingKey): ExistingKey {
    if (existing.state !== 'done') return existing;
    const sealed = SEALED_MARKER in existing.response.headers;
    if (!this.sealer && !sealed) return existing;
    try {
      if (!this.sealer) {
        throw new SealedResponseError(
          'the stored response is sealed, and no encryption keys are configured',
        );
      }
      return { ...existing, response: this.sealer.open(scope, existing.response) };
    } catch (error) {
      if (!(error instanceof SealedResponseError)) throw error;
      const detail = error.detail ? ` (${error.detail})` : '';
      this.logger.error(`stored response of key ${scope.key}: ${error.message}${detail}`);
      throw new IdempotencyStoredResponseUnreadableError(error.message);
    }
  }

  /** The pool TypeORM opened for the app; read on each call, as TypeORM may reconnect. */
  private get pool(): Pool {
    const dataSource = this.dataSource();
    const driver = dataSource.driver as unknown as { master?: Pool };
    if (!dataSource.isInitialized || !driver.master) {
      throw new Error('the TypeORM DataSource is not initialized');
    }
    return driver.master;
  }

  /**
   * Every call is bounded, the wait for a connection included: a pool waiting for a database
   * that does not answer would otherwise hold the request forever. A statement still running
   * when the time is up is cancelled on the server, and a connection that arrives after it is
   * given back unused, so that nothing runs once the client was told 503. Any failure is a 503.
   */
  private async query<R extends QueryResultRow>(
    statement: { name: string; text: string },
    values: unknown[],
  ): Promise<QueryResult<R>> {
    try {
      const client = await acquire(this.pool, this.timeoutMs);
      try {
        const config: QueryConfig = { name: statement.name, text: statement.text, values };
        const result = await queryWithDeadline<R>(client, config, this.timeoutMs);
        client.release();
        return result;
      } catch (error) {
        client.release(error instanceof Error ? error : new Error(String(error)));
        throw error;
      }
    } catch (error) {
      this.logger.error(`idempotency store call ${statement.name} failed: ${String(error)}`);
      throw new IdempotencyStoreUnavailableError(error);
    }
  }
}

/** The parameters of statement 5, for the plain finish and the last phase alike. */
function completeValues(claim: ActiveClaim, response: StoredResponse): unknown[] {
  return [...fenceOf(claim), response.status, response.body, response.headers];
}

/** The first four parameters of every fenced statement: the key, then the fencing token. */
function fenceOf(claim: ActiveClaim): [string, string, string, string] {
  return [claim.tenantId, claim.key, claim.lockVersion, claim.claimId];
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
    fence: { lockVersion: row.lock_version, claimId: row.claim_id },
  };
}
