/**
 * Fixed (session of 2026-12-07, fourth): the purge lists whether its role may drop each
 * partition (`LIST_PARTITIONS`' `droppable`); one it may not (another role's) is no longer
 * detached (an orphan) but emptied through the keys table, its expired keys deleted, with a
 * warning naming its owner (`expirySteps`' `empty`). The partition itself stays attached.
 *
 * Adversary 110 (pool): two app roles that each pass the partitioned start-up check (members
 * of the keys table's owner, CREATE on its schema: what `partitionMakerProblem` asks for) share
 * one keys table, e.g. an API and a worker service with roles of their own, or credentials
 * rotated to a new role. Each partition is owned by the role whose session made it
 * (`idempotency_keys_create_partitions()`: a plain CREATE TABLE), and `DROP TABLE` wants that
 * table's owner, which the parent's owner's membership does not give. So the purge of the other
 * role detaches an expired partition (`DETACH ... CONCURRENTLY`, the parent's owner may), then
 * fails its `DROP TABLE` ("must be owner of table idempotency_keys_..."): the partition is left
 * behind detached, out of `idempotency_key_partitions()`, never looked at again, and each purge
 * fails the same way on the next one. Expired keys pile up in orphan tables nothing drops.
 *
 * User code:
 *   CREATE ROLE migrator; (migrations run as migrator)
 *   CREATE ROLE api LOGIN; CREATE ROLE worker LOGIN; GRANT migrator TO api, worker;
 *   GRANT CREATE ON SCHEMA public TO api, worker; GRANT ALL ON ALL TABLES IN SCHEMA public TO api, worker;
 *   both: IdempotencyModule.forRoot({ ..., partitionedExpiry: true, purgeIntervalMs })
 *
 * Code path: migrations/partition-functions.ts CREATE_PARTITIONS_FUNCTION (the partition owned
 * by the session's role); lib/claim/partitioned/partitioned-postgres-claim.store.ts `expire`
 * (DETACH CONCURRENTLY, then DROP TABLE); lib/schema/schema-check.ts `partitionMakerProblem`
 * (passes both roles).
 *
 * Docs quote: docs/operations/partitioned-expiry.md "then takes every partition whose whole
 * range is past `retentionMs` ... Then the partition is detached `CONCURRENTLY` ... and dropped";
 * "The partitions ahead are made by the app's own sessions: ... An app that logs in as a role
 * of its own ... is refused at start-up, saying what to grant".
 *
 * Severity: medium (retention not kept; behind a pooler the expiry stops for good: expired keys' storage grows without bound in orphan
 * tables, the purge fails on every run; nothing answered wrong or run twice).
 *
 * Fails now: (un-skipped) the worker's purge rejects with `must be owner of table
 * idempotency_keys_...`, and the partition is left detached (an orphan table holding the key).
 *
 * (Neither role owns the schema: a schema's owner may drop any table in it.)
 *
 * Behind a pooler in transaction mode (the locked detach: DETACH and DROP in one transaction)
 * the failed DROP rolls the DETACH back: the same partition fails first on every purge and no
 * partition is ever dropped again: expired keys stay in the table, and a key reused after its
 * retention replays its old answer (second skipped case).
 *
 * Controls: both roles pass the start-up check; the same story with one role (it makes and
 * purges its own partitions): the purge succeeds and no table is left.
 *
 * Suggested fix: have the partition function give each partition to the keys table's owner
 * (`ALTER TABLE %I OWNER TO <owner of idempotency_keys>` before the ATTACH, allowed to a member of
 * that role), or make it SECURITY DEFINER owned by the owner with a pinned search_path; the
 * purge then drops any partition as a member of the owner. At least, DROP before losing the
 * partition from the list (detach and drop in one go, or list detached orphans by name).
 */
import { randomBytes } from 'node:crypto';
import { Logger } from '@nestjs/common';
import { Client } from 'pg';
import { DataSource } from 'typeorm';
import { PartitionIdempotencyKeys1764461600000 } from '../../../lib/index.js';
import { IdempotencyDatabase } from '../../../lib/data-layers/idempotency-database.js';
import { PartitionedPostgresClaimStore } from '../../../lib/claim/partitioned/partitioned-postgres-claim.store.js';
import { IdempotencySchemaCheck } from '../../../lib/idempotency-schema.check.js';
import { type ResolvedIdempotencyOptions } from '../../../lib/shapes/idempotency-options.interface.js';
import { adminUrl } from '../../support/database.js';
import { createMigratedDatabase, type MigratedDatabase } from '../../support/migrated-database.js';
import { describePartitioned } from '../../support/postgres-version.js';

if (!process.env.TEST_LOGS) Logger.overrideLogger(false);

const PARTITION_MS = 1000;
const RETENTION_MS = 1500;
const fingerprint = Buffer.alloc(32, 5);
const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

const suffix = randomBytes(4).toString('hex');
const owner = `adv110_own_${suffix}`;
const api = `adv110_api_${suffix}`;
const worker = `adv110_wrk_${suffix}`;

interface Session {
  source: DataSource;
  store: PartitionedPostgresClaimStore;
  database: IdempotencyDatabase;
}

async function sessionAs(
  database: MigratedDatabase,
  user: string,
  pooler?: 'transaction',
): Promise<Session> {
  const url = new URL(database.url);
  url.username = user;
  url.password = '';
  const source = new DataSource({ type: 'postgres', url: url.toString() });
  await source.initialize();
  const idem = new IdempotencyDatabase(() => source, 5000, pooler);
  const store = new PartitionedPostgresClaimStore(idem, {
    partitionMs: PARTITION_MS,
    partitionsAhead: 2,
  });
  return { source, store, database: idem };
}

function passesStartUpCheck(session: Session): Promise<boolean> {
  const options = {
    partitionedExpiry: { partitionMs: PARTITION_MS, partitionsAhead: 2 },
  } as unknown as ResolvedIdempotencyOptions;
  return new IdempotencySchemaCheck(session.database, options).onApplicationBootstrap().then(
    () => true,
    () => false,
  );
}

async function finished({ store }: Session, key: string): Promise<void> {
  const outcome = await store.claim({ tenantId: 'r', key }, fingerprint, 60_000);
  if (outcome.kind !== 'claimed') throw new Error(`${key} not claimed: ${outcome.kind}`);
  await store.finish(outcome.claim, {
    status: 201,
    headers: { 'content-type': 'application/json' },
    body: Buffer.from('"ok"'),
  });
}

/** Tables named like the partitions that are no partition of the keys table any more. */
async function orphans(database: MigratedDatabase): Promise<string[]> {
  const rows = (await database.dataSource.query(
    `SELECT c.relname::text AS name FROM pg_class c
     WHERE c.relkind = 'r' AND c.relname LIKE 'idempotency\\_keys\\_2%'
       AND NOT EXISTS (SELECT FROM pg_inherits i WHERE i.inhrelid = c.oid)`,
  )) as { name: string }[];
  return rows.map((row) => row.name);
}

/** `maker` claims a key (making the partitions); past its retention, `purger` purges. */
async function story(database: MigratedDatabase, maker: Session, purger: Session) {
  await finished(maker, `old-${randomBytes(3).toString('hex')}`);
  await sleep(PARTITION_MS * 2 + RETENTION_MS + 1200);
  const purge = await purger.store.purgeBatch(RETENTION_MS).then(
    () => 'ok',
    (error: unknown) => String(error),
  );
  return { purge, orphans: await orphans(database) };
}

async function setUp(label: string) {
  const database = await createMigratedDatabase(label, [PartitionIdempotencyKeys1764461600000]);
  const q = (sql: string) => database.dataSource.query(sql);
  await q(`DO $$ BEGIN CREATE ROLE ${owner}; EXCEPTION WHEN duplicate_object THEN END $$`);
  for (const table of ['idempotency_keys', 'idempotency_keys_legacy']) {
    await q(`ALTER TABLE ${table} OWNER TO ${owner}`);
  }
  for (const role of [api, worker]) {
    await q(`DO $$ BEGIN CREATE ROLE ${role} LOGIN; EXCEPTION WHEN duplicate_object THEN END $$`);
    await q(`GRANT ${owner} TO ${role}`);
    await q(`GRANT CREATE ON SCHEMA public TO ${role}`);
    await q(`GRANT ALL ON ALL TABLES IN SCHEMA public TO ${role}`);
  }
  return database;
}

describePartitioned(
  'adversary 110 pool: partitions made by another app role are never dropped',
  () => {
    let single: MigratedDatabase;
    let shared: MigratedDatabase;
    const sessions: Session[] = [];

    beforeAll(async () => {
      single = await setUp('adv110_pool_role_single');
      shared = await setUp('adv110_pool_role_shared');
    }, 120_000);

    afterAll(async () => {
      for (const session of sessions) await session.source.destroy();
      await single?.drop();
      await shared?.drop();
      const root = new Client({ connectionString: adminUrl() });
      await root.connect();
      for (const role of [api, worker, owner]) await root.query(`DROP ROLE IF EXISTS ${role}`);
      await root.end();
    });

    it('control: both roles pass the start-up check; one role purges its own partitions', async () => {
      const apiOwn = await sessionAs(single, api);
      const workerShared = await sessionAs(shared, worker);
      sessions.push(apiOwn, workerShared);
      expect(await passesStartUpCheck(apiOwn)).toBe(true);
      expect(await passesStartUpCheck(workerShared)).toBe(true);
      expect(await story(single, apiOwn, apiOwn)).toEqual({ purge: 'ok', orphans: [] });
    }, 60_000);

    it("the worker's purge drops the partitions the API's sessions made", async () => {
      const apiShared = await sessionAs(shared, api);
      const workerShared = await sessionAs(shared, worker);
      sessions.push(apiShared, workerShared);
      const outcome = await story(shared, apiShared, workerShared);
      // Observed: { purge: 'error: must be owner of table idempotency_keys_...', orphans: ['idempotency_keys_...'] }.
      expect(outcome).toEqual({ purge: 'ok', orphans: [] });
    }, 60_000);

    it("behind a pooler in transaction mode the worker's purges expire the API's keys", async () => {
      // The locked detach (pooler: 'transaction') detaches and drops in one transaction: the
      // failed DROP rolls the DETACH back, the same partition comes first on every purge, and
      // no partition after it is ever dropped either.
      const apiShared = await sessionAs(shared, api);
      const workerPooled = await sessionAs(shared, worker, 'transaction');
      sessions.push(apiShared, workerPooled);
      const key = `kept-${randomBytes(3).toString('hex')}`;
      await finished(apiShared, key);
      await sleep(PARTITION_MS * 2 + RETENTION_MS + 1200);
      const purges: string[] = [];
      for (let i = 0; i < 2; i += 1) {
        purges.push(
          await workerPooled.store.purgeBatch(RETENTION_MS).then(
            () => 'ok',
            (error: unknown) => String(error).replace(/_\d{8}t\d+/, '_<t>'),
          ),
        );
      }
      const left = (await shared.dataSource.query(
        'SELECT count(*)::int AS n FROM idempotency_keys WHERE key = $1',
        [key],
      )) as { n: number }[];
      // Observed: purges ['error: must be owner of table idempotency_keys_<t>', the same], key left: 1.
      expect({ purges, left: left[0].n }).toEqual({ purges: ['ok', 'ok'], left: 0 });
    }, 60_000);
  },
);
