/**
 * Fixed (session of 2026-12-07, third): the start-up check asks for CREATE where the
 * partitions are made, the session's `current_schema()` (the first schema of its search path
 * that exists: `CREATE TABLE` of an unqualified name lands there), not in the keys table's
 * schema (`makesIn` in lib/schema/schema-check.ts), and its remedy names that schema.
 * Un-skipped.
 *
 * Adversary 110 (pool): under `partitionedExpiry` the start-up check refuses an app role that
 * works. `partitionMakerProblem` wants CREATE on the schema that holds `idempotency_keys`, but
 * `idempotency_keys_create_partitions()` makes each partition with an unqualified `CREATE TABLE
 * %I`, in the session's creation schema (the first of its `search_path`), and attaches it by
 * the same unqualified name. PostgreSQL 15's own recommended set-up ("secure schema usage
 * pattern": `public` without CREATE for anyone, each user a schema of its own, the default
 * `search_path` `"$user", public`) is such a session: the app's role, a member of the tables'
 * owner, makes and attaches partitions in its own schema, and claims, replays and expiry all
 * work; yet the app is refused at start-up, told to `GRANT CREATE ON SCHEMA public TO app`,
 * which that pattern exists to avoid.
 *
 * User code:
 *   -- migrations run as `migrator` (tables in public); PostgreSQL 15+ defaults
 *   CREATE ROLE app LOGIN; GRANT migrator TO app; CREATE SCHEMA app AUTHORIZATION app;
 *   IdempotencyModule.forRootAsync({ useFactory: () => ({ globalKeys: true, pool, partitionedExpiry: true }) })
 *
 * Code path: lib/schema/schema-check.ts SCHEMA_CATALOG_QUERY (`has_schema_privilege(n.oid,
 * 'CREATE')`, n = the keys table's schema), `partitionMakerProblem`; migrations/
 * partition-functions.ts CREATE_PARTITIONS_FUNCTION (`CREATE TABLE %I`, `ATTACH PARTITION %I`).
 *
 * Docs quote: docs/operations/partitioned-expiry.md "The partitions ahead are made by the app's
 * own sessions: `CREATE TABLE` in the keys table's schema" (they are made in the session's
 * schema); the brief: a working app is not refused.
 *
 * Severity: medium (a working set-up refused at start-up, its remedy a grant the user may not
 * want; nothing lost or run twice).
 *
 * Fails now: (un-skipped) the app is refused ("the role adv110_app_... may not make the
 * partitions ahead ... (CREATE TABLE in schema public): GRANT CREATE ON SCHEMA public TO ...").
 *
 * Controls: the same role, through the partitioned store itself (no start-up check): a key
 * claimed, finished and replayed, its partitions made in the role's schema.
 *
 * Suggested fix: check CREATE where the partitions are made: `has_schema_privilege(
 * current_schema(), 'CREATE')` (and name that schema in the refusal); better, make the partition
 * function qualify its tables with the keys table's schema (see adversary110-pool-partitions-
 * made-in-user-schema), after which the check as it is reads the right schema.
 */
import { randomBytes } from 'node:crypto';
import { Controller, type INestApplication, Logger, Module, Post } from '@nestjs/common';
import { Client, type Pool } from 'pg';
import request from 'supertest';
import { DataSource } from 'typeorm';
import {
  IdempotencyModule,
  Idempotent,
  PartitionIdempotencyKeys1764461600000,
} from '../../../lib/index.js';
import { IdempotencyDatabase } from '../../../lib/data-layers/idempotency-database.js';
import { PartitionedPostgresClaimStore } from '../../../lib/claim/partitioned/partitioned-postgres-claim.store.js';
import { bootstrapTestApp } from '../../support/bootstrap.js';
import { adminUrl } from '../../support/database.js';
import { createMigratedDatabase, type MigratedDatabase } from '../../support/migrated-database.js';
import { describePartitioned } from '../../support/postgres-version.js';
import { createTestPool, endTestPool } from '../../support/test-pool.js';

if (!process.env.TEST_LOGS) Logger.overrideLogger(false);

let pool: Pool;
let orders = 0;

@Controller()
class OrdersController {
  @Post('orders')
  @Idempotent()
  place() {
    orders += 1;
    return { order: orders };
  }
}

@Module({
  imports: [
    IdempotencyModule.forRootAsync({
      useFactory: () => ({ globalKeys: true, pool, partitionedExpiry: true }),
    }),
  ],
  controllers: [OrdersController],
})
class OrdersModule {}

function urlAs(database: MigratedDatabase, user: string): string {
  const url = new URL(database.url);
  url.username = user;
  url.password = '';
  return url.toString();
}

/** Starts the app as `user` and sends one keyed request. */
async function story(database: MigratedDatabase, user: string) {
  pool = createTestPool({ connectionString: urlAs(database, user), max: 2 });
  pool.on('error', () => undefined);
  let app: INestApplication | undefined;
  try {
    app = await bootstrapTestApp(OrdersModule, 'express').catch((error: unknown) => {
      return { refused: String(error) } as unknown as INestApplication;
    });
    if ('refused' in app) return { refused: (app as unknown as { refused: string }).refused };
    const answer = await request(app.getHttpServer())
      .post('/orders')
      .set('Idempotency-Key', `k-${randomBytes(4).toString('hex')}`);
    return { status: answer.status };
  } finally {
    if (app && !('refused' in app)) await app.close();
    await endTestPool(pool);
  }
}

const suffix = randomBytes(4).toString('hex');
const owner = `adv110_migrator_${suffix}`;
const role = `adv110_app_${suffix}`;
const fingerprint = Buffer.alloc(32, 7);

describePartitioned(
  'adversary 110 pool: a role with a schema of its own, refused though it works',
  () => {
    let database: MigratedDatabase;

    beforeAll(async () => {
      database = await createMigratedDatabase('adv110_pool_own_schema', [
        PartitionIdempotencyKeys1764461600000,
      ]);
      const q = (sql: string) => database.dataSource.query(sql);
      await q(`CREATE ROLE ${owner}`);
      for (const table of [
        'idempotency_keys',
        'idempotency_keys_legacy',
        'processed_messages',
        'message_failures',
        'idempotency_response_bodies',
      ]) {
        await q(`ALTER TABLE ${table} OWNER TO ${owner}`);
      }
      await q(`CREATE ROLE ${role} LOGIN`);
      await q(`GRANT ${owner} TO ${role}`);
      // PostgreSQL 15's secure schema usage pattern: a schema of the user's own, nothing in public.
      await q(`CREATE SCHEMA ${role} AUTHORIZATION ${role}`);
    }, 120_000);

    afterAll(async () => {
      await database?.drop();
      const root = new Client({ connectionString: adminUrl() });
      await root.connect();
      await root.query(`DROP ROLE IF EXISTS ${role}`);
      await root.query(`DROP ROLE IF EXISTS ${owner}`);
      await root.end();
    });

    it('control: the role claims, finishes and replays a key through the partitioned store', async () => {
      const fresh = new DataSource({ type: 'postgres', url: urlAs(database, role) });
      await fresh.initialize();
      try {
        const store = new PartitionedPostgresClaimStore(
          new IdempotencyDatabase(() => fresh, 5000),
          {
            partitionMs: 60_000,
            partitionsAhead: 2,
          },
        );
        const first = await store.claim({ tenantId: 't', key: 'k' }, fingerprint, 60_000);
        expect(first.kind).toBe('claimed');
        if (first.kind !== 'claimed') return;
        await store.finish(first.claim, {
          status: 201,
          headers: { 'content-type': 'application/json' },
          body: Buffer.from('"ok"'),
        });
        const again = await store.claim({ tenantId: 't', key: 'k' }, fingerprint, 60_000);
        expect(again.kind).not.toBe('claimed');
        const made = (await database.dataSource.query(
          `SELECT DISTINCT c.relnamespace::regnamespace::text AS schema
         FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid
         WHERE i.inhparent = 'public.idempotency_keys'::regclass AND c.relname <> 'idempotency_keys_legacy'`,
        )) as { schema: string }[];
        expect(made).toEqual([{ schema: role }]);
      } finally {
        await fresh.destroy();
      }
    }, 60_000);

    it('the app of a role with a schema of its own starts and serves', async () => {
      const outcome = await story(database, role);
      // Observed: { refused: '... may not make the partitions ahead ... GRANT CREATE ON SCHEMA public TO ...' }.
      expect(outcome).toEqual({ status: 201 });
    }, 60_000);
  },
);
