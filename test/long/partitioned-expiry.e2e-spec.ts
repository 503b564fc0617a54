import { type INestApplication, Logger } from '@nestjs/common';
import request from 'supertest';
import { DataSource } from 'typeorm';
import { IdempotencyPurger, PartitionIdempotencyKeys1764461600000 } from '../../lib/index.js';
import { type ActiveClaim } from '../../lib/shapes/active-claim.js';
import { IdempotencyDatabase } from '../../lib/data-layers/idempotency-database.js';
import { PartitionedPostgresClaimStore } from '../../lib/claim/partitioned/partitioned-postgres-claim.store.js';
import { createTestDatabase, type TestDatabase } from '../support/database.js';
import { createMigratedDatabase, type MigratedDatabase } from '../support/migrated-database.js';
import { partitionOf, partitions, untilDatabaseTime } from '../support/partitions.js';
import { createTestApp, SIDE_EFFECTS_DDL } from '../support/test-app.js';
import { describePartitioned } from '../support/postgres-version.js';

/**
 * The retention kept by dropping partitions (1 s wide, 1.5 s of retention): finished keys go
 * with their partition; keys that must outlive it (unfinished ones, late finishers) are
 * carried forward into the live partition first, unchanged but for `placed_at`.
 */
if (!process.env.TEST_LOGS) Logger.overrideLogger(false);

const PARTITION_MS = 1000;
const RETENTION_MS = 1500;
const fingerprint = Buffer.alloc(32, 9);
const response = (body: string) => ({
  status: 201,
  headers: { 'content-type': 'application/json' },
  body: Buffer.from(body),
});

interface KeyRow {
  partition: string;
  claim_id: string;
  created_at: Date;
  placed_at: Date;
  phase_results: Record<string, unknown>;
}

describePartitioned('the partitioned store’s retention', () => {
  let database: MigratedDatabase;
  let db: DataSource;
  let store: PartitionedPostgresClaimStore;
  const newStore = () =>
    new PartitionedPostgresClaimStore(new IdempotencyDatabase(() => db, 5000), {
      partitionMs: PARTITION_MS,
      partitionsAhead: 2,
    });

  beforeAll(async () => {
    database = await createMigratedDatabase('partition_expiry', [
      PartitionIdempotencyKeys1764461600000,
    ]);
    db = database.dataSource;
    store = newStore();
  });
  afterAll(async () => {
    await database?.drop();
  });

  const rowOf = async (key: string) => {
    const rows = (await db.query(
      `SELECT tableoid::regclass::text AS partition, claim_id, created_at, placed_at, phase_results
       FROM idempotency_keys WHERE key = $1`,
      [key],
    )) as KeyRow[];
    return rows[0];
  };
  const names = async () => (await partitions(db)).map((p) => p.name);
  /** Waits until the partition is wholly past the retention, by the database's clock. */
  const untilExpired = async (name: string, extraMs = 0) => {
    const partition = (await partitions(db)).find((p) => p.name === name);
    if (!partition?.toAt) throw new Error(`no partition ${name}`);
    await untilDatabaseTime(db, new Date(partition.toAt.getTime() + RETENTION_MS + extraMs));
  };
  const claimed = async (key: string, leaseMs = 60_000): Promise<ActiveClaim> => {
    const outcome = await store.claim({ tenantId: 'r', key }, fingerprint, leaseMs);
    if (outcome.kind !== 'claimed') throw new Error(`key ${key} was not free`);
    return outcome.claim;
  };

  it('keeps an unfinished key through the drop of its partition: taken over with its claim id and phases', async () => {
    const claim = await claimed('unfinished', 200); // its worker "crashes": no finish
    await store.commitPhase(claim, 'charge_created', () => Promise.resolve({ psp: 'auth_1' }));
    const before = await rowOf('unfinished');

    await untilExpired(before.partition);
    await store.purgeBatch(RETENTION_MS);

    expect(await names()).not.toContain(before.partition);
    const after = await rowOf('unfinished');
    expect(after.partition).not.toBe(before.partition);
    expect(after.placed_at.getTime()).toBeGreaterThan(before.placed_at.getTime());
    // Still the same key: its claim id (the base of the PSP's key), phases and age.
    expect(after).toMatchObject({
      claim_id: claim.claimId,
      created_at: before.created_at,
      phase_results: { charge_created: { psp: 'auth_1' } },
    });

    const found = await store.claim({ tenantId: 'r', key: 'unfinished' }, fingerprint, 60_000);
    if (found.kind !== 'existing' || found.existing.state !== 'started') {
      throw new Error('the unfinished key must be found started');
    }
    expect(found.existing.leaseExpired).toBe(true);
    const resumed = await store.takeOver(
      { tenantId: 'r', key: 'unfinished' },
      found.existing.fence,
      60_000,
    );
    expect(resumed).toMatchObject({
      claimId: claim.claimId,
      recoveryPoint: 'charge_created',
      phaseResults: { charge_created: { psp: 'auth_1' } },
    });
    expect(await store.finish(resumed!, response('"resumed"'))).toBe(true);
  });

  it('drops a finished key with its partition once the retention passed, leaving no dead rows', async () => {
    const claim = await claimed('finished');
    expect(await store.finish(claim, response('"first"'))).toBe(true);
    const { partition } = await rowOf('finished');

    await store.purgeBatch(RETENTION_MS);
    expect(await rowOf('finished')).toBeDefined(); // within the retention: kept

    await untilExpired(partition);
    await store.purgeBatch(RETENTION_MS);
    expect(await names()).not.toContain(partition);
    expect(await rowOf('finished')).toBeUndefined();
    const again = await store.claim({ tenantId: 'r', key: 'finished' }, fingerprint, 60_000);
    expect(again.kind === 'claimed' && again.claim.claimId !== claim.claimId).toBe(true);

    const [{ dead }] = (await db.query(
      `SELECT coalesce(sum(n_dead_tup), 0)::int AS dead FROM pg_stat_user_tables
       WHERE relname LIKE 'idempotency_keys%'`,
    )) as { dead: number }[];
    // The carried key and the takeover of the test before; a DELETE would leave every key.
    expect(dead).toBeLessThanOrEqual(5);
  });

  it('keeps a key finished after its partition ended for a whole retention after it finished', async () => {
    const claim = await claimed('late', 100);
    const { partition } = await rowOf('late');
    const bounds = (await partitions(db)).find((p) => p.name === partition)!;
    // Finished 500 ms after its partition ended (taken over after an outage, say).
    await untilDatabaseTime(db, new Date(bounds.toAt!.getTime() + 500));
    expect(await store.finish(claim, response('"late"'))).toBe(true);

    await untilExpired(partition, 50);
    await store.purgeBatch(RETENTION_MS);
    expect(await names()).not.toContain(partition);
    const carried = await rowOf('late');
    expect(carried.partition).not.toBe(partition);
    const replay = await store.claim({ tenantId: 'r', key: 'late' }, fingerprint, 60_000);
    expect(replay).toMatchObject({ kind: 'existing', existing: { state: 'done' } });

    await untilExpired(carried.partition, 50);
    await store.purgeBatch(RETENTION_MS);
    expect(await rowOf('late')).toBeUndefined();
  });

  it('carries a key into the newest partition when the purge has outrun every partition ahead', async () => {
    // A purge that stalls past the partitions ahead (here: the partitions made, then the clock
    // let run past them all before the drop) must still carry the key that outlives its
    // partition, not fail with "no partition of relation idempotency_keys found for row".
    const database = new IdempotencyDatabase(() => db, 5000);
    const outrun = new PartitionedPostgresClaimStore(database, {
      partitionMs: PARTITION_MS,
      partitionsAhead: 2,
    });
    await claimed('outrun', 200);
    const { partition, placed_at: before } = await rowOf('outrun');
    await outrun.purgeBatch(RETENTION_MS); // the partitions ahead, as any purge makes them
    await untilExpired(partition);
    const newest = (await partitions(db)).reduce((a, b) => (a.toAt! > b.toAt! ? a : b));
    await untilDatabaseTime(db, new Date(newest.toAt!.getTime() + 50));

    const expire = (outrun as unknown as { expire(c: unknown, r: number): Promise<void> }).expire;
    await database.withConnection((client) => expire.call(outrun, client, RETENTION_MS));

    expect(await names()).not.toContain(partition);
    const after = await rowOf('outrun');
    expect(after.partition).toBe(newest.name);
    expect(after.placed_at.getTime()).toBeGreaterThan(before.getTime());
    const found = await store.claim({ tenantId: 'r', key: 'outrun' }, fingerprint, 60_000);
    expect(found).toMatchObject({ kind: 'existing', existing: { state: 'started' } });
  });

  it('lets several instances purge at once: each partition is dropped by one of them', async () => {
    await claimed('concurrent-purge');
    const { partition } = await rowOf('concurrent-purge');
    await untilExpired(partition);
    const instances = [newStore(), newStore(), newStore()];
    await Promise.all(instances.map((instance) => instance.purgeBatch(RETENTION_MS)));
    expect(await names()).not.toContain(partition);
    expect(await partitionOf(db, 'concurrent-purge')).toBeDefined(); // unfinished: carried
  });
});

describePartitioned(
  'partitionedExpiry through the module: IdempotencyPurger drops partitions',
  () => {
    let database: TestDatabase;
    let app: INestApplication;
    let db: DataSource;

    beforeAll(async () => {
      database = await createTestDatabase('partition_purger');
      app = await createTestApp({
        databaseUrl: database.url,
        adapter: 'express',
        migrations: [PartitionIdempotencyKeys1764461600000],
        idempotency: {
          retentionMs: RETENTION_MS,
          partitionedExpiry: { partitionMs: PARTITION_MS },
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

    const order = (key: string) =>
      request(app.getHttpServer()).post('/orders').set('Idempotency-Key', key).send({ amount: 3 });
    const executions = async () =>
      ((await db.query(`SELECT count(*)::int AS n FROM side_effects`)) as { n: number }[])[0].n;

    it('replays a key within the retention, and runs it anew once its partition is dropped', async () => {
      await order('purged-key').expect(201);
      expect((await order('purged-key')).headers['idempotent-replayed']).toBe('true');
      const partition = await partitionOf(db, 'purged-key');
      const bounds = (await partitions(db)).find((p) => p.name === partition)!;

      // Past the retention of both its partition and its answer: an answer stored after the
      // partition's end (a loaded machine, 100 ms partitions) is carried forward until then.
      const [{ finished }] = (await db.query(
        "SELECT finished_at AS finished FROM idempotency_keys WHERE key = 'purged-key'",
      )) as { finished: Date }[];
      const end = Math.max(bounds.toAt!.getTime(), finished.getTime());
      await untilDatabaseTime(db, new Date(end + RETENTION_MS));
      await app.get(IdempotencyPurger).purgeExpired();
      expect((await partitions(db)).map((p) => p.name)).not.toContain(partition);

      const again = await order('purged-key').expect(201);
      expect(again.headers['idempotent-replayed']).toBeUndefined();
      expect(await executions()).toBe(2);
    });
  },
);
