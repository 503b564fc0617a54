import { randomUUID } from 'node:crypto';
import { type ExistingKey, type Fence, leaseOf } from '../decisions/decide.js';
import { START_RECOVERY_POINT } from '../shapes/idempotency.constants.js';
import { type ActiveClaim } from '../shapes/active-claim.js';
import {
  type ClaimOutcome,
  type ClaimStore,
  type KeyScope,
} from '../shapes/claim-store.interface.js';
import { type StoredResponse } from '../shapes/stored-response.js';
import { holdStartedAt } from './hold-started.js';

/** A key's record, as the PostgreSQL row holds it. */
export interface MemoryClaimRecord {
  scope: KeyScope;
  fingerprint: Buffer;
  claimId: string;
  lockVersion: number;
  recoveryPoint: string;
  lockedUntil: number;
  /** Given back by its owner: its heartbeat no longer renews it (a takeover leases it anew). */
  released?: boolean;
  createdAt: number;
  /** When its last takeover began its current hold (PostgreSQL's `leased_at`). */
  leasedAt?: number;
  finishedAt?: number;
  response?: StoredResponse;
}

/**
 * A claim store in this process's memory: the reference the contract suite is written
 * against, and a stand-in for unit tests of an app's own code. Not for production: every
 * instance of the app has its own keys, and a restart forgets them all.
 */
export class MemoryClaimStore implements ClaimStore {
  readonly transactional = false;
  protected readonly records = new Map<string, MemoryClaimRecord>();

  claim(scope: KeyScope, fingerprint: Buffer, leaseMs: number): Promise<ClaimOutcome> {
    const id = this.idOf(scope);
    const found = this.records.get(id);
    if (found) return Promise.resolve({ kind: 'existing', existing: this.existing(found) });
    const record: MemoryClaimRecord = {
      scope: { ...scope },
      fingerprint: Buffer.from(fingerprint),
      claimId: randomUUID(),
      lockVersion: 0,
      recoveryPoint: START_RECOVERY_POINT,
      lockedUntil: Date.now() + leaseMs,
      createdAt: Date.now(),
    };
    this.records.set(id, record);
    return Promise.resolve({ kind: 'claimed', claim: this.active(record, leaseMs) });
  }

  takeOver(scope: KeyScope, fence: Fence, leaseMs: number): Promise<ActiveClaim | undefined> {
    const record = this.records.get(this.idOf(scope));
    if (!record || record.response || !this.leaseExpired(record)) return Promise.resolve(undefined);
    if (String(record.lockVersion) !== fence.lockVersion || record.claimId !== fence.claimId) {
      return Promise.resolve(undefined);
    }
    record.lockVersion += 1;
    record.lockedUntil = Date.now() + leaseMs;
    record.leasedAt = Date.now();
    record.released = false;
    return Promise.resolve(this.active(record, leaseMs));
  }

  finish(claim: ActiveClaim, response: StoredResponse): Promise<boolean> {
    const record = this.owned(claim);
    if (!record) return Promise.resolve(false);
    record.response = {
      status: response.status,
      headers: { ...response.headers },
      body: Buffer.from(response.body),
    };
    record.finishedAt = Date.now();
    record.recoveryPoint = 'finished';
    return Promise.resolve(true);
  }

  completeAnswer(claim: ActiveClaim, response: StoredResponse): Promise<boolean> {
    const record = this.records.get(this.idOf(claim));
    if (
      !record?.response ||
      String(record.lockVersion) !== claim.lockVersion ||
      record.claimId !== claim.claimId
    ) {
      return Promise.resolve(false);
    }
    record.response = {
      status: response.status,
      headers: { ...response.headers },
      body: Buffer.from(response.body),
    };
    return Promise.resolve(true);
  }

  release(claim: ActiveClaim, forget: boolean): Promise<void> {
    const record = this.owned(claim);
    if (!record) return Promise.resolve();
    if (forget && record.lockVersion === 0 && record.recoveryPoint === START_RECOVERY_POINT) {
      this.records.delete(this.idOf(claim));
    } else {
      // Ended in the past, not now: a retry in the same millisecond finds it expired.
      record.lockedUntil = Date.now() - 1;
      record.released = true;
    }
    return Promise.resolve();
  }

  extendLease(claim: ActiveClaim): Promise<boolean> {
    const record = this.owned(claim);
    if (!record || record.released) return Promise.resolve(false);
    record.lockedUntil = Math.max(record.lockedUntil, Date.now() + claim.leaseMs);
    return Promise.resolve(true);
  }

  purgeBatch(retentionMs: number, batchSize: number): Promise<KeyScope[]> {
    const horizon = Date.now() - retentionMs;
    return Promise.resolve(
      this.deleteWhere(
        (record) => record.finishedAt !== undefined && record.finishedAt < horizon,
        batchSize,
      ),
    );
  }

  purgeAbandonedBatch(horizonMs: number, batchSize: number): Promise<number> {
    const horizon = Date.now() - horizonMs;
    const abandoned = (record: MemoryClaimRecord) =>
      !record.response && record.createdAt < horizon && this.leaseExpired(record);
    return Promise.resolve(this.deleteWhere(abandoned, batchSize).length);
  }

  oldestUnfinishedAgeMs(): Promise<number | undefined> {
    let oldest: number | undefined;
    for (const record of this.records.values()) {
      const started = holdStartedAt({ ...record, finished: record.response !== undefined });
      if (started !== undefined) oldest = Math.min(oldest ?? Infinity, started);
    }
    return Promise.resolve(oldest === undefined ? undefined : Date.now() - oldest);
  }

  /** The map key: exact, whatever the tenant and key hold. */
  protected idOf(scope: KeyScope): string {
    return JSON.stringify([scope.tenantId, scope.key]);
  }

  protected leaseExpired(record: MemoryClaimRecord): boolean {
    return leaseOf(record.lockedUntil, Date.now()).leaseExpired;
  }

  /** The record, if `claim` still owns it: fenced by lock version and claim id. */
  protected owned(claim: ActiveClaim): MemoryClaimRecord | undefined {
    const record = this.records.get(this.idOf(claim));
    if (!record || record.response) return undefined;
    if (String(record.lockVersion) !== claim.lockVersion || record.claimId !== claim.claimId) {
      return undefined;
    }
    return record;
  }

  protected existing(record: MemoryClaimRecord): ExistingKey {
    const now = Date.now();
    if (record.response) {
      return {
        state: 'done',
        fingerprint: record.fingerprint,
        response: record.response,
        finishedAgeMs: now - (record.finishedAt ?? now),
      };
    }
    return {
      state: 'started',
      fingerprint: record.fingerprint,
      ...leaseOf(record.lockedUntil, now),
      fence: { lockVersion: String(record.lockVersion), claimId: record.claimId },
    };
  }

  private active(record: MemoryClaimRecord, leaseMs: number): ActiveClaim {
    return {
      ...record.scope,
      claimId: record.claimId,
      lockVersion: String(record.lockVersion),
      recoveryPoint: record.recoveryPoint,
      phaseResults: {},
      leaseMs,
    };
  }

  private deleteWhere(matches: (record: MemoryClaimRecord) => boolean, limit: number): KeyScope[] {
    const deleted: KeyScope[] = [];
    for (const [id, record] of this.records) {
      if (deleted.length >= limit) break;
      if (!matches(record)) continue;
      this.records.delete(id);
      deleted.push(record.scope);
    }
    return deleted;
  }
}
