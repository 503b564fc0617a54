import { Logger, type LoggerService } from '@nestjs/common';
import { DataSource } from 'typeorm';
import { PartitionIdempotencyKeys1764461600000, PermanentDatabaseError } from '../lib/index.js';
import { IdempotencyDatabase } from '../lib/data-layers/idempotency-database.js';
import { PartitionedPostgresClaimStore } from '../lib/claim/partitioned/partitioned-postgres-claim.store.js';
import { PostgresClaimStore } from '../lib/claim/postgres-claim.store.js';
import { createMigratedDatabase, type MigratedDatabase } from './support/migrated-database.js';
import { partitionOf, partitions } from './support/partitions.js';
import { describePartitioned } from './support/postgres-version.js';

/**
 * What keeps the partitioned layout safe besides the claim: the isolation the claim needs, the
 * abandoned-key purge that must not match rows by `ctid` alone, partitions that run out, and a
 * layout that disagrees with the app's options, each refused or said in words that say what to do.
 */
const fingerprint = Buffer.alloc(32, 5);
const errors: string[] = [];
const capture: LoggerService = {
  log: () => undefined,
  warn: () => undefined,
  error: (message: unknown) => errors.push(String(message)),
};
beforeAll(() => Logger.overrideLogger(capture));
afterAll(() => Logger.overrideLogger(false));

/** The store's failure: the library's permanent 500, and the explanation it carries. */
async function failureOf(promise: Promise<unknown>): Promise<string> {
  const error: unknown = await promise.then(
    () => undefined,
    (failure: unknown) => failure,
  );
  expect(error).toBeInstanceOf(PermanentDatabaseError);
  return String((error as PermanentDatabaseError).cause);
}

describePartitioned('the partitioned layout’s guards', () => {
  let database: MigratedDatabase;
  let db: DataSource;
  let store: PartitionedPostgresClaimStore;

  beforeAll(async () => {
    database = await createMigratedDatabase('partition_guards', [
      PartitionIdempotencyKeys1764461600000,
    ]);
    db = database.dataSource;
    store = new PartitionedPostgresClaimStore(new IdempotencyDatabase(() => db, 5000), {
      partitionMs: 1000,
      partitionsAhead: 2,
    });
    await store.claim({ tenantId: 'g', key: 'warm-up' }, fingerprint, 60_000);
  });
  afterAll(async () => {
    await database?.drop();
  });

  describe('the claim refuses to run under a snapshot older than its lock', () => {
    let repeatableRead: DataSource;
    beforeAll(async () => {
      repeatableRead = new DataSource({
        type: 'postgres',
        url: database.url,
        extra: { options: '-c default_transaction_isolation=repeatable\\ read' },
      });
      await repeatableRead.initialize();
    });
    afterAll(async () => {
      await repeatableRead?.destroy();
    });

    it('runs at READ COMMITTED when the connections default to REPEATABLE READ', async () => {
      // The library names READ COMMITTED for its own claim on such a database (see
      // `IdempotencyDatabase.query`): the function's guard below is not met, and the key is
      // claimed once, in a partition.
      const onRepeatableRead = new PartitionedPostgresClaimStore(
        new IdempotencyDatabase(() => repeatableRead, 5000),
        { partitionMs: 1000, partitionsAhead: 2 },
      );
      const first = await onRepeatableRead.claim({ tenantId: 'g', key: 'rr' }, fingerprint, 1000);
      expect(first.kind).toBe('claimed');
      const again = await onRepeatableRead.claim({ tenantId: 'g', key: 'rr' }, fingerprint, 1000);
      expect(again.kind).not.toBe('claimed');
      expect(await partitionOf(db, 'rr')).toBeDefined();
    });

    it.each(['REPEATABLE READ', 'SERIALIZABLE'] as const)(
      'raises 55000 in an explicit %s transaction, and runs under READ COMMITTED',
      async (level) => {
        const call = `SELECT claimed FROM idempotency_claim('g', 'explicit', '\\x00', 1000)`;
        await expect(db.transaction(level, (manager) => manager.query(call))).rejects.toMatchObject(
          {
            driverError: {
              code: '55000',
              message: `idempotency_claim needs READ COMMITTED isolation, not ${level}`,
            },
          },
        );
        const rows = (await db.transaction('READ COMMITTED', (manager) => manager.query(call))) as {
          claimed: boolean;
        }[];
        expect(rows).toHaveLength(1);
        await db.query(`DELETE FROM idempotency_keys WHERE key = 'explicit'`);
      },
    );
  });

  it('purges abandoned keys by partition and ctid, never a row of another partition with the same ctid', async () => {
    // Two partitions of their own, far ahead, whose first rows both sit at ctid (0,1).
    for (const [name, from, to] of [
      ['idempotency_keys_guard_a', '2100-01-01', '2100-01-02'],
      ['idempotency_keys_guard_b', '2100-01-02', '2100-01-03'],
    ]) {
      await db.query(`CREATE TABLE ${name} (LIKE idempotency_keys INCLUDING ALL)`);
      await db.query(
        `ALTER TABLE idempotency_keys ATTACH PARTITION ${name} FOR VALUES FROM ('${from}') TO ('${to}')`,
      );
    }
    await db.query(
      `INSERT INTO idempotency_keys (tenant_id, key, fingerprint, locked_until, created_at, placed_at)
       VALUES ('g', 'abandoned', '\\x00', now() - interval '1 day', now() - interval '40 days',
               '2100-01-01T12:00Z')`,
    );
    await db.query(
      `INSERT INTO idempotency_keys (tenant_id, key, fingerprint, state, response_code,
         response_body, finished_at, placed_at)
       VALUES ('g', 'bystander', '\\x00', 'done', 201, '\\x7b7d', now(), '2100-01-02T12:00Z')`,
    );
    const ctids = (await db.query(
      `SELECT key, ctid::text FROM idempotency_keys WHERE key IN ('abandoned', 'bystander')`,
    )) as { ctid: string }[];
    expect(ctids.map((row) => row.ctid)).toEqual(['(0,1)', '(0,1)']);

    // A DELETE that matches rows by ctid alone, as the plain table's purges did, tried and
    // rolled back: it takes every row at (0,1), the bystander (finished a moment ago) among them.
    const runner = db.createQueryRunner();
    await runner.startTransaction();
    try {
      const [, deleted] = (await runner.query(
        `DELETE FROM idempotency_keys WHERE ctid IN (
           SELECT ctid FROM idempotency_keys
           WHERE created_at < now() - interval '30 days' AND state = 'started'
             AND locked_until < clock_timestamp()
           LIMIT 10 FOR UPDATE SKIP LOCKED)`,
      )) as [unknown, number];
      expect(deleted).toBeGreaterThanOrEqual(2);
      expect(
        await runner.query(`SELECT key FROM idempotency_keys WHERE key = 'bystander'`),
      ).toEqual([]);
    } finally {
      await runner.rollbackTransaction();
      await runner.release();
    }

    expect(await store.purgeAbandonedBatch(30 * 86_400_000, 10)).toBe(1);
    expect(await partitionOf(db, 'abandoned')).toBeUndefined();
    expect(await partitionOf(db, 'bystander')).toBe('idempotency_keys_guard_b');
  });

  it('lets the plain store’s purges (the option left off) take only expired keys of a partitioned table', async () => {
    for (const [name, from, to] of [
      ['idempotency_keys_guard_c', '2100-02-01', '2100-02-02'],
      ['idempotency_keys_guard_d', '2100-02-02', '2100-02-03'],
    ]) {
      await db.query(`CREATE TABLE ${name} (LIKE idempotency_keys INCLUDING ALL)`);
      await db.query(
        `ALTER TABLE idempotency_keys ATTACH PARTITION ${name} FOR VALUES FROM ('${from}') TO ('${to}')`,
      );
    }
    // Expired keys at (0,1) and (0,2) of one partition, live ones at the same places of another.
    await db.query(
      `INSERT INTO idempotency_keys (tenant_id, key, fingerprint, state, locked_until,
         finished_at, created_at, placed_at) VALUES
       ('p', 'expired', '\\x00', 'done', NULL, now() - interval '2 days',
        now() - interval '2 days', '2100-02-01T01:00Z'),
       ('p', 'abandoned', '\\x00', 'started', now() - interval '1 day', NULL,
        now() - interval '40 days', '2100-02-01T02:00Z'),
       ('p', 'live-unfinished', '\\x00', 'started', now() + interval '1 minute', NULL, now(),
        '2100-02-02T01:00Z'),
       ('p', 'live-finished', '\\x00', 'done', NULL, now(), now(), '2100-02-02T02:00Z')`,
    );
    const plain = new PostgresClaimStore(new IdempotencyDatabase(() => db, 5000));
    const purged = await plain.purgeBatch(86_400_000, 1000);
    expect(purged).toContainEqual({ tenantId: 'p', key: 'expired' });
    expect(purged.filter((scope) => scope.tenantId === 'p')).toHaveLength(1);
    await plain.purgeAbandonedBatch(30 * 86_400_000, 1000);
    const left = (await db.query(
      `SELECT key FROM idempotency_keys WHERE tenant_id = 'p' ORDER BY key`,
    )) as { key: string }[];
    expect(left.map((row) => row.key)).toEqual(['live-finished', 'live-unfinished']);
  });

  it('makes the partitions it finds missing, and claims once more', async () => {
    // Dropped by hand behind the store's back: the live partition and those ahead of it.
    const now = Date.now();
    for (const { name, toAt, fromAt } of await partitions(db)) {
      if (toAt && toAt.getTime() > now && (fromAt?.getTime() ?? 0) < Date.UTC(2100, 0, 1)) {
        await db.query(`DROP TABLE ${name}`);
      }
    }
    errors.length = 0;
    const outcome = await store.claim({ tenantId: 'g', key: 'after-a-gap' }, fingerprint, 60_000);
    expect(outcome.kind).toBe('claimed');
    expect(await partitionOf(db, 'after-a-gap')).toBeDefined();
    // It did meet the gap (the database's own error is logged), and went on.
    expect(errors.some((line) => line.includes('no partition of relation'))).toBe(true);
  });

  it('says so when the table is partitioned but partitionedExpiry is off', async () => {
    const plain = new PostgresClaimStore(new IdempotencyDatabase(() => db, 5000));
    // 42P10 alone cannot tell this from a plain table whose primary key was dropped: both are
    // named (the start-up check, which reads the catalog, says which).
    const message =
      "idempotency_keys has no primary key or unique index on (tenant_id, key), which the claim's " +
      'ON CONFLICT needs: if the PartitionIdempotencyKeys migration ran, turn partitionedExpiry ' +
      'on in IdempotencyModule.forRoot() (or revert that migration); otherwise restore the ' +
      'primary key (ALTER TABLE idempotency_keys ADD PRIMARY KEY (tenant_id, key))';
    errors.length = 0;
    expect(await failureOf(plain.claim({ tenantId: 'g', key: 'plain' }, fingerprint, 1000))).toBe(
      `Error: ${message}`,
    );
    expect(errors).toContain(message);
  });
});

describe('partitionedExpiry on a table that was not partitioned', () => {
  let database: MigratedDatabase;
  beforeAll(async () => {
    database = await createMigratedDatabase('partition_missing');
  });
  afterAll(async () => {
    await database?.drop();
  });

  it('says which migration to run', async () => {
    const store = new PartitionedPostgresClaimStore(
      new IdempotencyDatabase(() => database.dataSource, 5000),
      { partitionMs: 1000, partitionsAhead: 2 },
    );
    const message =
      'partitionedExpiry is on, but idempotency_keys is not partitioned: run the ' +
      'PartitionIdempotencyKeys1764461600000 migration (see the README\'s "Partitioned expiry")';
    errors.length = 0;
    expect(await failureOf(store.claim({ tenantId: 'g', key: 'k' }, fingerprint, 1000))).toBe(
      `Error: ${message}`,
    );
    expect(errors).toContain(message);
  });
});
