import { randomBytes } from 'node:crypto';
import { type DataSource } from 'typeorm';
import { type ClaimOutcome } from '../lib/shapes/claim-store.interface.js';
import { PartitionIdempotencyKeys1764461600000 } from '../lib/index.js';
import { IdempotencyStoreUnavailableError } from '../lib/shapes/idempotency.errors.js';
import { type ActiveClaim } from '../lib/shapes/active-claim.js';
import { IdempotencyDatabase } from '../lib/data-layers/idempotency-database.js';
import { PartitionedPostgresClaimStore } from '../lib/claim/partitioned/partitioned-postgres-claim.store.js';
import { PostgresClaimStore } from '../lib/claim/postgres-claim.store.js';
import { CLAIM_BATCH } from '../lib/claim/postgres-statements.js';
import { createMigratedDatabase, type MigratedDatabase } from './support/migrated-database.js';
import { PARTITIONS_SUPPORTED } from './support/postgres-version.js';

/**
 * Claims batched under load (`ClaimBatcher`), on real PostgreSQL, plain and partitioned: the
 * claims made while one is on its way go as one statement, and each still gets its own row,
 * fence and error.
 */
const LAYOUTS = PARTITIONS_SUPPORTED ? (['plain', 'partitioned'] as const) : (['plain'] as const);

describe.each(LAYOUTS)('claims batched on the %s table', (layout) => {
  let database: MigratedDatabase;
  let dataSource: DataSource;
  /** The names of the statements the store sent, in order. */
  let sent: string[] = [];

  beforeAll(async () => {
    database = await createMigratedDatabase(
      `claim_batch_${layout}`,
      layout === 'partitioned' ? [PartitionIdempotencyKeys1764461600000] : [],
    );
    dataSource = database.dataSource;
  });
  afterAll(async () => {
    await database?.drop();
  });

  /** A store of its own (a process of its own), counting its statements in `sent`. */
  function store(timeoutMs = 5000): PostgresClaimStore {
    const db = new IdempotencyDatabase(() => dataSource, timeoutMs);
    const query = db.query.bind(db);
    db.query = ((statement, ...rest) => {
      sent.push(statement.name);
      return query(statement, ...rest);
    }) as typeof db.query;
    return layout === 'partitioned'
      ? new PartitionedPostgresClaimStore(db, { partitionMs: 3_600_000, partitionsAhead: 2 })
      : new PostgresClaimStore(db);
  }

  const fingerprint = randomBytes(32);
  const scope = (key: string) => ({ tenantId: '1', key: `${layout}-${key}` });
  const claims = () => sent.filter((name) => name.startsWith('idempotency_claim'));
  const owned = (outcome: ClaimOutcome): ActiveClaim => {
    if (outcome.kind !== 'claimed') throw new Error(`not claimed: ${JSON.stringify(outcome)}`);
    return outcome.claim;
  };

  beforeEach(() => {
    sent = [];
  });

  /**
   * The rows of keys like `pattern` once nothing else runs on the test's database and none is
   * left (polled up to `withinMs`): what is there then stays.
   */
  async function quietRows(pattern: string, withinMs: number) {
    const by = Date.now() + withinMs;
    for (;;) {
      const [{ running }] = (await dataSource.query(
        `SELECT count(*)::int AS running FROM pg_stat_activity
         WHERE datname = current_database() AND pid <> pg_backend_pid()
           AND backend_type = 'client backend' AND state <> 'idle'`,
      )) as { running: number }[];
      const rows = (await dataSource.query(
        `SELECT key, state, lock_version FROM idempotency_keys WHERE key LIKE $1`,
        [pattern],
      )) as { key: string; state: string; lock_version: string }[];
      if ((running === 0 && rows.length === 0) || Date.now() > by) return rows;
      await new Promise((resolve) => setTimeout(resolve, 50));
    }
  }

  it('sends a lone claim at once, and the claims made while it is on its way as one statement', async () => {
    const s = store();
    // Made in one tick: the first goes alone, the other 20 wait for it and go together.
    const outcomes = await Promise.all(
      Array.from({ length: 21 }, (_, i) => s.claim(scope(`burst-${i}`), fingerprint, 60_000)),
    );
    expect(outcomes.map((o) => o.kind)).toEqual(Array(21).fill('claimed'));
    expect(claims()).toEqual(
      layout === 'plain'
        ? ['idempotency_claim_v5', 'idempotency_claim_batch_v3']
        : ['idempotency_claim_partitioned_v2', 'idempotency_claim_batch_partitioned_v2'],
    );
    // Each its own row: its own claim id, the one stored for its key.
    const rows = (await dataSource.query(
      `SELECT key, claim_id FROM idempotency_keys WHERE key LIKE $1`,
      [`${layout}-burst-%`],
    )) as { key: string; claim_id: string }[];
    const stored = new Map(rows.map((row) => [row.key, row.claim_id]));
    expect(stored.size).toBe(21);
    for (const [i, outcome] of outcomes.entries()) {
      const claim = owned(outcome);
      expect(claim.key).toBe(`${layout}-burst-${i}`);
      expect(claim.claimId).toBe(stored.get(claim.key));
      expect(claim.lockVersion).toBe('0');
    }
    // And each its own fence: one finish stores one key's answer.
    const response = { status: 201, headers: {}, body: Buffer.from('{"n":7}') };
    expect(await s.finish(owned(outcomes[7]), response)).toBe(true);
    const done = (await dataSource.query(
      `SELECT key FROM idempotency_keys WHERE key LIKE $1 AND state = 'done'`,
      [`${layout}-burst-%`],
    )) as { key: string }[];
    expect(done.map((row) => row.key)).toEqual([`${layout}-burst-7`]);
  });

  it('answers each claim of a batch with its own key’s record: found, finished, refused', async () => {
    const s = store();
    const finished = owned(await s.claim(scope('found-done'), fingerprint, 60_000));
    const body = Buffer.from('{"stored":true}');
    await s.finish(finished, { status: 200, headers: { 'x-a': 'b' }, body });
    await s.claim(scope('found-live'), fingerprint, 60_000);
    sent = [];
    const [first, done, live, fresh] = await Promise.all([
      s.claim(scope('found-first'), fingerprint, 60_000),
      s.claim(scope('found-done'), fingerprint, 60_000),
      s.claim(scope('found-live'), fingerprint, 60_000),
      s.claim(scope('found-fresh'), fingerprint, 60_000),
    ]);
    expect(claims()).toHaveLength(2);
    expect(first.kind).toBe('claimed');
    expect(fresh.kind).toBe('claimed');
    expect(done).toMatchObject({
      kind: 'existing',
      existing: { state: 'done', response: { status: 200, headers: { 'x-a': 'b' }, body } },
    });
    expect(live).toMatchObject({
      kind: 'existing',
      existing: { state: 'started', leaseExpired: false, released: false },
    });
  });

  it('never claims a key twice when it is claimed twice within one batch', async () => {
    const s = store();
    const [, a, b, c] = await Promise.all([
      s.claim(scope('twice-first'), fingerprint, 60_000),
      s.claim(scope('twice'), fingerprint, 60_000),
      s.claim(scope('twice'), fingerprint, 60_000),
      s.claim(scope('twice-other'), fingerprint, 60_000),
    ]);
    expect([a.kind, b.kind]).toEqual(['claimed', 'existing']);
    expect(b).toMatchObject({
      kind: 'existing',
      existing: { state: 'started', leaseExpired: false },
    });
    expect(c.kind).toBe('claimed');
    // The second claim of the key waited for the batch after the one with the first.
    expect(claims()).toHaveLength(3);
  });

  // Why the batcher holds a key's second claim back: in one statement both claims of a key
  // would match the one row its insert added, and both requests would own the key.
  // (On the partitioned table the batch's statement calls the claim function once per claim.)
  if (layout === 'plain') {
    it('control: one statement with a key twice would give the key to both of its claims', async () => {
      const key = scope('control-twice');
      const { rows } = await new IdempotencyDatabase(() => dataSource, 5000).query<{
        i: string;
        claimed: boolean;
        claim_id: string;
      }>(CLAIM_BATCH, [
        [key.tenantId, key.tenantId, key.tenantId],
        [`${layout}-control-other`, key.key, key.key],
        [fingerprint, fingerprint, fingerprint],
        [60_000, 60_000, 60_000],
      ]);
      const twice = rows.filter((row) => row.i !== '1');
      expect(twice.map((row) => [row.i, row.claimed]).sort()).toEqual([
        ['2', true],
        ['3', true],
      ]);
      expect(twice[0].claim_id).toBe(twice[1].claim_id);
    });
  }

  it('lets exactly one worker take over a lease that expired while the key was in a batch', async () => {
    const key = scope('takeover');
    const [a, b] = [store(), store()];
    await a.claim(scope('takeover-warm'), fingerprint, 60_000); // the partitions ahead made
    await dataSource.query(
      `INSERT INTO idempotency_keys (tenant_id, key, fingerprint, locked_until)
       VALUES ($1, $2, $3, now() - interval '1 second')`,
      [key.tenantId, key.key, fingerprint],
    );
    // Two processes find the expired lease, each in a batch of its own.
    const found = await Promise.all(
      [a, b].flatMap((s) => [
        s.claim(scope('takeover-filler-' + (s === a ? 'a' : 'b')), fingerprint, 60_000),
        s.claim(key, fingerprint, 60_000),
        s.claim(scope('takeover-other-' + (s === a ? 'a' : 'b')), fingerprint, 60_000),
      ]),
    );
    const fences = [found[1], found[4]].map((outcome) => {
      if (outcome.kind !== 'existing' || outcome.existing.state !== 'started') {
        throw new Error(`expected the expired lease: ${JSON.stringify(outcome)}`);
      }
      expect(outcome.existing.leaseExpired).toBe(true);
      return outcome.existing.fence;
    });
    const taken = await Promise.all([
      a.takeOver(key, fences[0], 60_000),
      b.takeOver(key, fences[1], 60_000),
    ]);
    const winners = taken.filter((claim) => claim !== undefined);
    expect(winners).toHaveLength(1);
    expect(winners[0]!.lockVersion).toBe('1');
    // A batched claim after it finds the lease taken: a 409, not a second owner.
    const [, again] = await Promise.all([
      a.claim(scope('takeover-after'), fingerprint, 60_000),
      a.claim(key, fingerprint, 60_000),
    ]);
    expect(again).toMatchObject({
      kind: 'existing',
      existing: { state: 'started', leaseExpired: false, fence: { lockVersion: '1' } },
    });
  });

  it('answers each claim of a batch that failed on one claim’s row as its own claim would have', async () => {
    const s = store();
    const tooLong = scope('x'.repeat(300)); // the table's check: a key of 1 to 255 characters
    const alone = await s.claim(tooLong, fingerprint, 60_000).catch((error: unknown) => error);
    expect(alone).toBeInstanceOf(IdempotencyStoreUnavailableError);
    sent = [];
    const outcomes = await Promise.allSettled([
      s.claim(scope('row-first'), fingerprint, 60_000),
      s.claim(scope('row-a'), fingerprint, 60_000),
      s.claim(tooLong, fingerprint, 60_000),
      s.claim(scope('row-b'), fingerprint, 60_000),
    ]);
    expect(outcomes.map((o) => o.status)).toEqual([
      'fulfilled',
      'fulfilled',
      'rejected',
      'fulfilled',
    ]);
    const failed = outcomes[2] as PromiseRejectedResult;
    expect(failed.reason).toBeInstanceOf(IdempotencyStoreUnavailableError);
    expect((failed.reason as Error).message).toBe((alone as Error).message);
    expect(((failed.reason as Error).cause as { code: string }).code).toBe(
      ((alone as Error).cause as { code: string }).code,
    );
    // The lone first claim, the batch that failed, then its three claims one by one.
    expect(claims()).toHaveLength(5);
    const rows = (await dataSource.query(
      `SELECT key FROM idempotency_keys WHERE key LIKE $1 ORDER BY key`,
      [`${layout}-row-%`],
    )) as { key: string }[];
    expect(rows.map((row) => row.key)).toEqual([
      `${layout}-row-a`,
      `${layout}-row-b`,
      `${layout}-row-first`,
    ]);
  });

  it('answers every claim of a batch that the database did not answer with a 503, waiting once', async () => {
    const s = store(400);
    // Warm: the partitions ahead made, and a connection open.
    await s.claim(scope('outage-warm'), fingerprint, 60_000);
    const locker = dataSource.createQueryRunner();
    await locker.connect();
    await locker.startTransaction();
    try {
      await locker.query('LOCK TABLE idempotency_keys IN ACCESS EXCLUSIVE MODE');
      sent = [];
      const outcomes = await Promise.allSettled(
        Array.from({ length: 5 }, (_, i) => s.claim(scope(`outage-${i}`), fingerprint, 60_000)),
      );
      for (const outcome of outcomes) {
        expect(outcome.status).toBe('rejected');
        expect((outcome as PromiseRejectedResult).reason).toBeInstanceOf(
          IdempotencyStoreUnavailableError,
        );
      }
      // The lone first claim only: the others, queued behind it, were answered at their own
      // deadline (counted from when they asked), and a claim past it is never sent.
      expect(claims()).toHaveLength(1);
    } finally {
      await locker.rollbackTransaction();
      await locker.release();
    }
    // Nothing ran for any of them, and no key is held: a claim whose statement was on its way
    // at its deadline may still land once the lock is gone, and is then given back at once (a
    // key held to its 60 s lease would answer the retry of a request told 503 with a 409).
    // Read once the database is quiet (no statement of this database running but this read):
    // the claim's statement has then ended, cancelled or committed, and a row it left was
    // given back. Bounded: its deadline, its cancel (1 s at most), and the give-back.
    expect(await quietRows(`${layout}-outage-_`, 3_000)).toEqual([]);
  });
});
