import { type DataSource } from 'typeorm';
import {
  claimStoreContract,
  ClaimStoreContractTimingError,
  type ClaimStoreHarness,
  CONTRACT_RETENTION_MS,
  describeClaimStoreContract,
  MemoryClaimStore,
} from '../lib/testing/index.js';
import { type MemoryClaimRecord } from '../lib/testing/memory-claim.store.js';
import { type ActiveClaim } from '../lib/shapes/active-claim.js';
import { type ClaimOutcome, type KeyScope } from '../lib/shapes/claim-store.interface.js';
import { type Fence } from '../lib/decisions/decide.js';
import { IdempotencyDatabase } from '../lib/data-layers/idempotency-database.js';
import { PostgresClaimStore } from '../lib/claim/postgres-claim.store.js';
import { RedisClaimStore } from '../lib/redis/index.js';
import { createMigratedDatabase, type MigratedDatabase } from './support/migrated-database.js';
import { redisServerInstalled, startTestRedis, type TestRedis } from './support/redis-server.js';

/**
 * The seam's contract, run against every store the package ships, and against stores broken
 * on purpose: each must fail exactly the rule it breaks, or the suite proves nothing.
 */
describeClaimStoreContract('memory (the reference)', { create: () => new MemoryClaimStore() });

describe('on PostgreSQL', () => {
  let database: MigratedDatabase;
  let dataSource: DataSource;
  beforeAll(async () => {
    database = await createMigratedDatabase('contract');
    dataSource = database.dataSource;
  });
  afterAll(async () => {
    await database?.drop();
  });
  describeClaimStoreContract('postgres', {
    create: () => new PostgresClaimStore(new IdempotencyDatabase(() => dataSource, 5000)),
  });
});

const onRedis = redisServerInstalled() || process.env.CI === 'true' ? describe : describe.skip;
if (!redisServerInstalled())
  console.warn('redis-server is not installed: the Redis store is not tested');

onRedis('on Redis', () => {
  let redis: TestRedis;
  beforeAll(async () => {
    redis = await startTestRedis();
  });
  afterAll(async () => {
    await redis?.stop();
  });
  describeClaimStoreContract('redis', {
    create: ({ retentionMs }) => new RedisClaimStore(redis.client(), { retentionMs }),
  });
});

const RULES = claimStoreContract().map((contractCase) => contractCase.name);
const rule = (start: string) => {
  const name = RULES.find((candidate) => candidate.startsWith(start));
  if (!name) throw new Error(`no rule starts with "${start}"`);
  return name;
};

/** Reads, yields, then writes: two claims in flight both find the key free. */
class ReadThenWriteClaims extends MemoryClaimStore {
  override async claim(scope: KeyScope, fingerprint: Buffer, leaseMs: number) {
    const free = !this.records.has(this.idOf(scope));
    await new Promise((resolve) => setImmediate(resolve));
    if (free) this.records.delete(this.idOf(scope));
    return super.claim(scope, fingerprint, leaseMs);
  }
}

/** Takes a lease over without asking whether it has expired. */
class NoExpiryCheck extends MemoryClaimStore {
  protected override leaseExpired(): boolean {
    return true;
  }
  protected override existing(record: MemoryClaimRecord) {
    const found = super.existing(record);
    return found.state === 'started'
      ? { ...found, leaseExpired: record.lockedUntil <= Date.now() }
      : found;
  }
}

/** Keeps the first 64 characters of a key, as a `varchar(64)` column would. */
class TruncatedKeys extends MemoryClaimStore {
  protected override idOf(scope: KeyScope): string {
    return JSON.stringify([scope.tenantId, scope.key.slice(0, 64)]);
  }
}

/** Compares keys without their case. */
class CaseFoldedKeys extends MemoryClaimStore {
  protected override idOf(scope: KeyScope): string {
    return JSON.stringify([scope.tenantId, scope.key.toLowerCase()]);
  }
}

/** Normalizes tenants and keys to NFC. */
class NormalizedKeys extends MemoryClaimStore {
  protected override idOf(scope: KeyScope): string {
    return JSON.stringify([scope.tenantId.normalize('NFC'), scope.key.normalize('NFC')]);
  }
}

/** Lets any claim of the key write: no fencing token. */
class Unfenced extends MemoryClaimStore {
  protected override owned(claim: ActiveClaim) {
    const record = this.records.get(this.idOf(claim));
    return record && !record.response ? record : undefined;
  }
}

/** Never purges: the retention is not kept. */
class NoRetention extends MemoryClaimStore {
  override purgeBatch(): Promise<KeyScope[]> {
    return Promise.resolve([]);
  }
}

/** Purges by age alone, unfinished keys included. */
class PurgesUnfinished extends MemoryClaimStore {
  override purgeBatch(retentionMs: number): Promise<KeyScope[]> {
    for (const [id, record] of this.records) {
      if ((record.finishedAt ?? record.createdAt) < Date.now() - retentionMs)
        this.records.delete(id);
    }
    return Promise.resolve([]);
  }
}

/** Gives a takeover a claim id of its own, so derived keys change after a crash. */
class NewClaimIdOnTakeOver extends MemoryClaimStore {
  override async takeOver(scope: KeyScope, fence: Fence, leaseMs: number) {
    const claim = await super.takeOver(scope, fence, leaseMs);
    if (!claim) return undefined;
    const record = this.records.get(this.idOf(scope))!;
    record.claimId = `${record.claimId}-new`;
    return { ...claim, claimId: record.claimId };
  }
}

/** Answers a claim of a finished key as if the key were free. */
class ForgetsFinished extends MemoryClaimStore {
  override claim(scope: KeyScope, fingerprint: Buffer, leaseMs: number): Promise<ClaimOutcome> {
    const found = this.records.get(this.idOf(scope));
    if (found?.response) this.records.delete(this.idOf(scope));
    return super.claim(scope, fingerprint, leaseMs);
  }
}

/** Takes a finished key over, if its old fence still matches. */
class TakeOverIgnoresState extends MemoryClaimStore {
  override takeOver(scope: KeyScope, fence: Fence, leaseMs: number) {
    const record = this.records.get(this.idOf(scope));
    if (record?.response && String(record.lockVersion) === fence.lockVersion) {
      record.response = undefined;
      record.lockedUntil = 0;
    }
    return super.takeOver(scope, fence, leaseMs);
  }
}

/** Takes any expired lease over, whatever fence it is given. */
class TakeOverIgnoresFence extends MemoryClaimStore {
  override takeOver(scope: KeyScope, _fence: Fence, leaseMs: number) {
    const record = this.records.get(this.idOf(scope));
    if (!record) return Promise.resolve(undefined);
    const fence = { lockVersion: String(record.lockVersion), claimId: record.claimId };
    return super.takeOver(scope, fence, leaseMs);
  }
}

/** Counts the retention from the claim, not the finish. */
class RetentionFromClaim extends MemoryClaimStore {
  override purgeBatch(retentionMs: number): Promise<KeyScope[]> {
    for (const [id, record] of this.records) {
      if (record.response && record.createdAt < Date.now() - retentionMs) this.records.delete(id);
    }
    return Promise.resolve([]);
  }
}

/** Answers a heartbeat as if it renewed the lease, and leaves it as it was. */
/** Leases again a key its owner gave back (GREATEST over a NULL). */
class HeartbeatRenewsReleased extends MemoryClaimStore {
  override extendLease(claim: ActiveClaim): Promise<boolean> {
    const record = this.owned(claim);
    if (record) record.lockedUntil = Math.max(record.lockedUntil, Date.now() + claim.leaseMs);
    return Promise.resolve(record !== undefined);
  }
}

class HeartbeatIgnored extends MemoryClaimStore {
  override extendLease(claim: ActiveClaim): Promise<boolean> {
    return Promise.resolve(this.owned(claim) !== undefined);
  }
}

/** Lets a release forget a finished key. */
class ReleaseIgnoresState extends MemoryClaimStore {
  override release(claim: ActiveClaim, forget: boolean): Promise<void> {
    const record = this.records.get(this.idOf(claim));
    if (forget && record?.response && record.claimId === claim.claimId) {
      this.records.delete(this.idOf(claim));
      return Promise.resolve();
    }
    return super.release(claim, forget);
  }
}

describe('the contract catches broken stores', () => {
  const cases: [string, () => MemoryClaimStore, string[]][] = [
    ['a read-then-write claim', () => new ReadThenWriteClaims(), [rule('one of 20')]],
    ['a takeover without an expiry check', () => new NoExpiryCheck(), [rule('a live lease')]],
    ['keys truncated to 64 characters', () => new TruncatedKeys(), [rule('keys that differ')]],
    ['keys compared without case', () => new CaseFoldedKeys(), [rule('keys that differ')]],
    ['keys normalized to NFC', () => new NormalizedKeys(), [rule('keys that differ')]],
    [
      'writes without a fencing token',
      () => new Unfenced(),
      [rule('a stale owner'), rule('only the owner')],
    ],
    ['no retention purge', () => new NoRetention(), [rule('a finished key expires')]],
    [
      'retention counted from the claim',
      () => new RetentionFromClaim(),
      [rule('a finished key expires')],
    ],
    [
      'a takeover of a finished key',
      () => new TakeOverIgnoresState(),
      [rule('a finished key, and')],
    ],
    [
      'a takeover whatever the fence',
      () => new TakeOverIgnoresFence(),
      [rule('a finished key, and')],
    ],
    [
      'a release that forgets a finished key',
      () => new ReleaseIgnoresState(),
      [rule('only the owner')],
    ],
    ['a purge of unfinished keys', () => new PurgesUnfinished(), [rule('a finished key expires')]],
    ['a heartbeat that renews nothing', () => new HeartbeatIgnored(), [rule('a heartbeat keeps')]],
    [
      'a heartbeat that leases a released key again',
      () => new HeartbeatRenewsReleased(),
      [rule('a released first')],
    ],
    [
      'a new claim id on takeover',
      () => new NewClaimIdOnTakeOver(),
      [rule('an expired lease'), rule('a released first')],
    ],
    [
      'finished keys forgotten',
      () => new ForgetsFinished(),
      [
        rule('a finished key gives'),
        rule('only the owner'),
        rule('a stale owner'),
        rule('a finished key expires'),
        // Its finished keys gone, it has none to complete.
        rule('a finished answer is completed'),
      ],
    ],
  ];

  it.each(cases)(
    '%s fails exactly the rules it breaks',
    async (_what, make, expected) => {
      // At once: each case makes its own store and keys, and most of a case is waiting out a
      // lease or a retention, so the cell takes as long as its longest case, not their sum.
      const outcomes = await Promise.all(
        claimStoreContract().map((contractCase) =>
          contractCase.run({ create: make }).then(
            () => undefined,
            (error: unknown) => ({ name: contractCase.name, error: error as Error }),
          ),
        ),
      );
      const failures = outcomes.filter((outcome) => outcome !== undefined);
      for (const { error } of failures) expect(error.name).toBe('ClaimStoreContractError');
      expect(failures.map(({ name }) => name).sort()).toEqual([...expected].sort());
    },
    30_000,
  );
});

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

/**
 * A correct store on a machine that pauses its heartbeats past the lease (the first `slow` of
 * them), which refuses to renew a lease that ran out, as a store may.
 */
class PausedHeartbeat extends MemoryClaimStore {
  constructor(private slow: number) {
    super();
  }
  override async extendLease(claim: ActiveClaim): Promise<boolean> {
    if (this.slow-- > 0) await sleep(claim.leaseMs);
    const record = this.owned(claim);
    if (!record || record.lockedUntil <= Date.now()) return false;
    return super.extendLease(claim);
  }
}

/** A correct store whose purge takes longer than the contract's retention. */
class SlowPurge extends MemoryClaimStore {
  override async purgeBatch(retentionMs: number, batchSize: number): Promise<KeyScope[]> {
    await sleep(CONTRACT_RETENTION_MS + 100);
    return super.purgeBatch(retentionMs, batchSize);
  }
}

describe('the contract tells a machine too slow for its timing from a broken store', () => {
  // Each waits out a lease or a retention, so they run at once.
  const run = (start: string, harness: ClaimStoreHarness) =>
    claimStoreContract()
      .find((candidate) => candidate.name.startsWith(start))!
      .run(harness);
  const failureOf = (running: Promise<void>) =>
    running.then(
      () => undefined,
      (thrown: unknown) => thrown as Error,
    );

  it.concurrent.each<[string, () => MemoryClaimStore, string, RegExp]>([
    [
      'a heartbeat paused past the lease',
      () => new PausedHeartbeat(Infinity),
      'a heartbeat keeps',
      /^the heartbeat ended \d+ ms after the claim began, past its 1000 ms lease: the machine was too loaded for the case to prove anything \(not a broken rule\)$/,
    ],
    [
      'a purge slower than the retention',
      () => new SlowPurge(),
      'a finished key expires',
      /^the purge ended \d+ ms after the finish began, past the 1000 ms retention: the key may have expired in its own time: the machine was too loaded for the case to prove anything \(not a broken rule\)$/,
    ],
  ])('%s: a timing error, not a broken rule', async (_what, make, start, message) => {
    const error = await failureOf(run(start, { create: make, attempts: 1 }));
    expect(error).toBeInstanceOf(ClaimStoreContractTimingError);
    expect(error?.name).toBe('ClaimStoreContractTimingError');
    expect(error?.message).toMatch(message);
  });

  it.concurrent('says how many runs proved nothing', async () => {
    const error = await failureOf(
      run('a heartbeat keeps', { create: () => new PausedHeartbeat(Infinity), attempts: 2 }),
    );
    expect(error).toBeInstanceOf(ClaimStoreContractTimingError);
    expect(error?.message).toMatch(
      /^2 runs proved nothing; the last: the heartbeat ended \d+ ms after the claim began, past its 2000 ms lease: /,
    );
  });

  it.concurrent('runs a case again when a pause spoiled one run', async () => {
    const stores: PausedHeartbeat[] = [];
    let slow = 1;
    await run('a heartbeat keeps', {
      create: () => {
        // The pause strikes the first store's heartbeat only.
        const store = new PausedHeartbeat(slow);
        slow = 0;
        stores.push(store);
        return store;
      },
    });
    expect(stores).toHaveLength(2);
  });

  it.each([0, 1.5, Number.NaN])('refuses attempts: %s', async (attempts) => {
    await expect(
      run('a heartbeat keeps', { create: () => new MemoryClaimStore(), attempts }),
    ).rejects.toThrow(
      `the contract's harness: attempts must be a whole number of at least 1 (got ${attempts})`,
    );
  });
});
