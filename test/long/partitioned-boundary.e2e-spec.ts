import { type INestApplication, Logger } from '@nestjs/common';
import request from 'supertest';
import { DataSource } from 'typeorm';
import { PartitionIdempotencyKeys1764461600000 } from '../../lib/index.js';
import { type KeyScope } from '../../lib/shapes/claim-store.interface.js';
import { IdempotencyDatabase } from '../../lib/data-layers/idempotency-database.js';
import { PartitionedPostgresClaimStore } from '../../lib/claim/partitioned/partitioned-postgres-claim.store.js';
import {
  claimOutcome,
  type ClaimRow,
  PostgresClaimStore,
} from '../../lib/claim/postgres-claim.store.js';
import { CLAIM } from '../../lib/claim/postgres-statements.js';
import { CREATE_PARTITIONS } from '../../lib/claim/partitioned/partitioned-statements.js';
import { createTestDatabase, type TestDatabase } from '../support/database.js';
import { createMigratedDatabase, type MigratedDatabase } from '../support/migrated-database.js';
import {
  nextBoundary,
  partitionOf,
  sidesOf,
  straddleBoundary,
  untilDatabaseTime,
} from '../support/partitions.js';
import { ADAPTERS, createTestApp, SIDE_EFFECTS_DDL } from '../support/test-app.js';
import { describePartitioned } from '../support/postgres-version.js';

/**
 * Retries that land in the next partition. PostgreSQL cannot make `(tenant_id, key)` unique
 * across a partitioned table, only within each partition: these tests cross real partition
 * boundaries (1 s wide) and check that a key still runs once, and, with the naive claim
 * (each partition's unique index as the only guard), that the same timing does run it twice.
 */
if (!process.env.TEST_LOGS) Logger.overrideLogger(false);

const fingerprint = Buffer.alloc(32, 7);
const PARTITION_MS = 1000;
/**
 * Partitions made ahead: the naive claim makes none of its own, so on a loaded machine (two
 * suites at a time) 2 s ahead could run out between two makings and fail its insert (23514).
 */
const PARTITIONS_AHEAD = 6;
/** Requests of one key sent at once, right at a boundary. */
const BURST = 20;

/** PostgreSQL's "no partition of relation … found for row" (23514), under the store's error. */
function noPartitionFor(error: unknown): boolean {
  for (let at: unknown = error; at instanceof Error; at = at.cause) {
    if ((at as { code?: unknown }).code === '23514') return true;
  }
  return false;
}

/** The trap: the plain claim with `ON CONFLICT DO NOTHING`, which each partition's own unique index arbitrates. */
class NaivePartitionedClaims extends PostgresClaimStore {
  override async claim(scope: KeyScope, fp: Buffer, leaseMs: number) {
    for (let madeAhead = 0; ;) {
      const { rows } = await this.query<ClaimRow>(
        {
          name: 'naive_partitioned_claim',
          // The insert guarded by nothing but the conflict: not the library's read of the
          // key across every partition first (CLAIM's NOT EXISTS), which is what saves it.
          text: CLAIM.text
            .replace('ON CONFLICT (tenant_id, key)', 'ON CONFLICT')
            .replace(/ AND NOT EXISTS \(SELECT FROM idempotency_keys[^)]*\)/, ''),
        },
        [scope.tenantId, scope.key, fp, leaseMs],
      ).catch(async (error: unknown) => {
        // No partition for its row yet (the stores make them ahead in the background, and a
        // loaded machine can let that lag behind a burst at a boundary: the fresh-clone CI of
        // 2026-12-05): the partitions made, as a store's claim waits for them, then again.
        if (!noPartitionFor(error) || madeAhead++ > 2) throw error;
        await this.query(CREATE_PARTITIONS, [PARTITION_MS, PARTITIONS_AHEAD]);
        return { rows: [] as ClaimRow[] };
      });
      // No row: the conflicting one committed after this statement's snapshot; run it again.
      if (rows.length > 0) {
        return claimOutcome(scope, rows.find((row) => row.claimed) ?? rows[0], leaseMs);
      }
    }
  }
}

describePartitioned('claims across a partition boundary, on the store', () => {
  let database: MigratedDatabase;
  let db: DataSource;
  let store: PartitionedPostgresClaimStore;
  /**
   * A store per claim of a burst, as many processes: one process sends the claims of one key
   * one batch after another (`ClaimBatcher`), so only claims from several race in PostgreSQL.
   */
  let processes: PartitionedPostgresClaimStore[];
  let naive: NaivePartitionedClaims;

  beforeAll(async () => {
    database = await createMigratedDatabase('partition_boundary', [
      PartitionIdempotencyKeys1764461600000,
    ]);
    db = database.dataSource;
    const idempotencyDatabase = new IdempotencyDatabase(() => db, 5000);
    store = new PartitionedPostgresClaimStore(idempotencyDatabase, {
      partitionMs: PARTITION_MS,
      partitionsAhead: PARTITIONS_AHEAD,
    });
    processes = Array.from(
      { length: BURST },
      () =>
        new PartitionedPostgresClaimStore(idempotencyDatabase, {
          partitionMs: PARTITION_MS,
          partitionsAhead: PARTITIONS_AHEAD,
        }),
    );
    naive = new NaivePartitionedClaims(idempotencyDatabase);
    // Partitions made ahead, as the store does before its first claim.
    await store.claim({ tenantId: 't', key: 'warm-up' }, fingerprint, 1000);
    for (const [i, each] of processes.entries()) {
      await each.claim({ tenantId: 't', key: `warm-up-${i}` }, fingerprint, 1000);
    }
  });
  afterAll(async () => {
    await database?.drop();
  });

  it('replays a key finished before the boundary after it, where the naive claim runs it again', async () => {
    const boundary = await nextBoundary(db, 300);
    const scope = { tenantId: 't', key: 'sequential' };
    const naiveScope = { tenantId: 't', key: 'sequential-naive' };
    for (const [claims, key] of [
      [store, scope],
      [naive, naiveScope],
    ] as const) {
      const first = await claims.claim(key, fingerprint, 60_000);
      if (first.kind !== 'claimed') throw new Error('the first claim must own the key');
      const response = { status: 201, headers: {}, body: Buffer.from('{"id":1}') };
      expect(await claims.finish(first.claim, response)).toBe(true);
    }
    const before = await partitionOf(db, scope.key);

    await untilDatabaseTime(db, boundary, -50);
    const retry = await store.claim(scope, fingerprint, 60_000);
    expect(retry).toMatchObject({ kind: 'existing', existing: { state: 'done' } });
    if (retry.kind === 'existing' && retry.existing.state === 'done') {
      expect(retry.existing.response.body.toString()).toBe('{"id":1}');
    }
    // The boundary was crossed: a key claimed now goes to another partition.
    await store.claim({ tenantId: 't', key: 'after-boundary' }, fingerprint, 60_000);
    expect(await partitionOf(db, 'after-boundary')).not.toBe(before);

    const naiveRetry = await naive.claim(naiveScope, fingerprint, 60_000);
    expect(naiveRetry.kind).toBe('claimed'); // the trap: the finished key would run again
  });

  it('gives a key claimed 20 times at once, right at the boundary, one owner; the naive claim two', async () => {
    const owners: number[] = [];
    let naiveOwners = 0;
    // Naive claims, interleaved with the store's, show where the burst's claims started: a
    // naive key with rows in two partitions is a burst that straddled its boundary.
    await straddleBoundary(db, async (attempt, boundary) => {
      const key = { tenantId: 't', key: `burst-${attempt}` };
      const naiveKey = { tenantId: 't', key: `burst-naive-${attempt}` };
      const outcomes = await Promise.all(
        Array.from({ length: 2 * BURST }, (_, i) =>
          i % 2 === 0
            ? processes[i / 2].claim(key, fingerprint, 60_000)
            : naive.claim(naiveKey, fingerprint, 60_000),
        ),
      );
      const owned = (parity: number) =>
        outcomes.filter((outcome, i) => i % 2 === parity && outcome.kind === 'claimed').length;
      owners.push(owned(0));
      naiveOwners = owned(1);
      const naiveRows = (await db.query(
        'SELECT tableoid::regclass::text AS name FROM idempotency_keys WHERE key = $1',
        [naiveKey.key],
      )) as { name: string }[];
      return sidesOf(
        db,
        boundary,
        naiveRows.map((row) => row.name),
      );
    });
    expect(owners.every((n) => n === 1)).toBe(true);
    expect(naiveOwners).toBe(2); // the trap: where the burst straddled, it ran twice
  });
});

describePartitioned.each(ADAPTERS)(
  'one key sent 20 times at once at a partition boundary, through the app (%s)',
  (adapter) => {
    let database: TestDatabase;
    let app: INestApplication;
    let db: DataSource;

    beforeAll(async () => {
      database = await createTestDatabase(`partition_app_${adapter}`);
      app = await createTestApp({
        databaseUrl: database.url,
        adapter,
        migrations: [PartitionIdempotencyKeys1764461600000],
        idempotency: {
          retentionMs: 4000,
          partitionedExpiry: { partitionMs: PARTITION_MS, partitionsAhead: 2 },
          // Every retry goes to the database, not to this process's memory of finished keys.
          replayCacheSize: 0,
        },
      });
      db = app.get(DataSource);
      await db.query(SIDE_EFFECTS_DDL);
    });
    afterAll(async () => {
      await app?.close();
      await database?.drop();
    });

    /** `amount` tells the executions of one key apart in `side_effects`. */
    const order = (key: string, amount = 1) =>
      request(app.getHttpServer())
        .post('/orders')
        .set('Idempotency-Key', key)
        .send({ amount, delayMs: 30 });
    const executionsOf = async (amount: number) => {
      const [{ n }] = (await db.query(
        `SELECT count(*)::int AS n FROM side_effects WHERE route = 'orders' AND amount = $1`,
        [amount],
      )) as { n: number }[];
      return n;
    };

    it('executes once', async () => {
      await order('app-warm-up').expect(201);
      const executions: number[] = [];
      await straddleBoundary(db, async (attempt, boundary) => {
        const key = `app-burst-${attempt}`;
        const amount = 1000 + attempt;
        const burst = await Promise.all(Array.from({ length: BURST }, () => order(key, amount)));
        expect(burst.every(({ status }) => status === 201 || status === 409)).toBe(true);
        const executed = burst.filter(
          (response) => response.status === 201 && !response.headers['idempotent-replayed'],
        );
        expect(executed).toHaveLength(1);
        executions.push(await executionsOf(amount));

        // A sentinel claimed after the burst: with the key's row placed before the boundary
        // and the sentinel's after it, the burst's claims went on across the boundary (one
        // process sends a key's claims one batch after another, so they span the burst).
        const sentinel = `app-sentinel-${attempt}`;
        await order(sentinel).expect(201);

        // A retry, after the boundary, is the stored answer.
        const retry = await order(key, amount).expect(201);
        expect(retry.headers['idempotent-replayed']).toBe('true');
        expect(retry.body).toEqual(executed[0].body);
        const names = await Promise.all([partitionOf(db, key), partitionOf(db, sentinel)]);
        return sidesOf(db, boundary, names as string[]);
      });
      expect(executions.every((n) => n === 1)).toBe(true);
    });
  },
);
