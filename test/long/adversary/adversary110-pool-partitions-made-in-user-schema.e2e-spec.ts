/**
 * Fixed (session of 2026-12-07, third): the start-up check asks for CREATE where the
 * partitions are made, the session's `current_schema()` (the first schema of its search path
 * that exists: `CREATE TABLE` of an unqualified name lands there), not in the keys table's
 * schema (`makesIn` in lib/schema/schema-check.ts), and its remedy names that schema.
 * Un-skipped.
 *
 * Adversary 110 (pool): under `partitionedExpiry` the start-up check's `partitionMakerProblem`
 * asks whether the app's role may CREATE in the schema that holds `idempotency_keys`, but the
 * partitions ahead are not made there: `idempotency_keys_create_partitions()` runs an
 * unqualified `CREATE TABLE %I (...)`, which PostgreSQL puts in the session's creation schema,
 * the first schema of its `search_path` (the function pins DateStyle and TimeZone, not
 * search_path). With the default `search_path` (`"$user", public`) and a schema named after
 * the app's role that it may use but not create in (a DBA's schema for the app's views, say),
 * the check passes (CREATE on public granted, the role a member of the owner, as the
 * refusal's own GRANTs say) and the app starts, then answers every keyed request 500: the
 * migration leaves no partition past its own time, and each attempt to make one fails
 * `permission denied for schema <role>`.
 *
 * User code (docs/operations/partitioned-expiry.md "The app's role makes the partitions",
 * following the refusal's remedy to the letter):
 *   CREATE ROLE migrator; ALTER TABLE idempotency_keys OWNER TO migrator;  -- the owner
 *   CREATE ROLE app LOGIN; GRANT ALL ON ALL TABLES IN SCHEMA public TO app;
 *   GRANT migrator TO app; GRANT CREATE ON SCHEMA public TO app;         -- as the refusal says
 *   CREATE SCHEMA app; GRANT USAGE ON SCHEMA app TO app;                 -- a DBA's schema for the app
 *   IdempotencyModule.forRootAsync({ useFactory: () => ({ globalKeys: true, pool, partitionedExpiry: true }) })
 *
 * Code path: lib/schema/schema-check.ts SCHEMA_CATALOG_QUERY (`has_schema_privilege(n.oid,
 * 'CREATE')`, n = the keys table's schema) and `partitionMakerProblem`;
 * migrations/partition-functions.ts CREATE_PARTITIONS_FUNCTION (`CREATE TABLE %I`, unqualified:
 * created in `current_schema()`, not in the keys table's schema).
 *
 * Docs quote: docs/operations/partitioned-expiry.md: "The partitions ahead are made by the app's
 * own sessions: `CREATE TABLE` in the keys table's schema, then `ATTACH PARTITION` ... An app that
 * logs in as a role of its own ... is refused at start-up, saying what to grant ... (It used to
 * start, then answer every keyed request 500 once the partitions the migration left ran out.)";
 * the brief's "every misconfiguration fails at start-up with what to do".
 *
 * Severity: medium (a broken app started: every keyed request 500 until the role's search_path
 * or grants change; nothing executed twice).
 *
 * Fails now: (un-skipped) the app starts and `POST /orders` with a key answers 500 (log:
 * `permission denied for schema adv110_app_...`).
 *
 * Controls: the same set-up without the role's schema (the partitions go to public): 201.
 *
 * Suggested fix: make the partitions where the keys table is: in CREATE_PARTITIONS_FUNCTION
 * qualify the new table with the keys table's schema (`format('CREATE TABLE %I.%I ...',
 * (SELECT relnamespace::regnamespace FROM pg_class WHERE oid = 'idempotency_keys'::regclass),
 * name)`, the same in the ATTACH, a migration re-making the function), which is what the check
 * reads; or have the check read `has_schema_privilege(current_schema(), 'CREATE')` too.
 */
import { randomBytes } from 'node:crypto';
import { Controller, type INestApplication, Logger, Module, Post } from '@nestjs/common';
import { Client, type Pool } from 'pg';
import request from 'supertest';
import {
  IdempotencyModule,
  Idempotent,
  PartitionIdempotencyKeys1764461600000,
} from '../../../lib/index.js';
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

/** Starts the app as `user` and sends one keyed request. */
async function story(database: MigratedDatabase, user: string) {
  const url = new URL(database.url);
  url.username = user;
  url.password = '';
  pool = createTestPool({ connectionString: url.toString(), max: 2 });
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
const owner = `adv110_owner_${suffix}`;
const roles: string[] = [owner];

/** A database whose keys table `owner` owns, and an app role set up as the refusal says. */
async function setUp(label: string, role: string, roleSchema: boolean) {
  const database = await createMigratedDatabase(label, [PartitionIdempotencyKeys1764461600000]);
  const q = (sql: string) => database.dataSource.query(sql);
  await q(`DO $$ BEGIN CREATE ROLE ${owner}; EXCEPTION WHEN duplicate_object THEN END $$`);
  await q(`ALTER TABLE idempotency_keys OWNER TO ${owner}`);
  await q(`CREATE ROLE ${role} LOGIN`);
  roles.push(role);
  await q(`GRANT ALL ON ALL TABLES IN SCHEMA public TO ${role}`);
  await q(`GRANT ${owner} TO ${role}`);
  await q(`GRANT CREATE ON SCHEMA public TO ${role}`);
  if (roleSchema) {
    // A DBA's schema for the app (views, say): the app may read it, not create in it.
    await q(`CREATE SCHEMA ${role}`);
    await q(`GRANT USAGE ON SCHEMA ${role} TO ${role}`);
  }
  return database;
}

describePartitioned(
  'adversary 110 pool: partitions made in the session schema, not the keys table one',
  () => {
    let plain: MigratedDatabase;
    let withSchema: MigratedDatabase;
    const plainRole = `adv110_app_a_${suffix}`;
    const schemaRole = `adv110_app_b_${suffix}`;

    beforeAll(async () => {
      plain = await setUp('adv110_pool_part_plain', plainRole, false);
      withSchema = await setUp('adv110_pool_part_user_schema', schemaRole, true);
    }, 120_000);

    afterAll(async () => {
      await plain?.drop();
      await withSchema?.drop();
      const root = new Client({ connectionString: adminUrl() });
      await root.connect();
      for (const role of roles.reverse()) await root.query(`DROP ROLE IF EXISTS ${role}`);
      await root.end();
    });

    it('control: the role granted as the refusal says, no schema of its own: 201', async () => {
      expect(await story(plain, plainRole)).toEqual({ status: 201 });
    }, 60_000);

    it('a role whose search_path starts at a schema it may not create in is refused at start-up, or served', async () => {
      const outcome = await story(withSchema, schemaRole);
      // Observed: { status: 500 } (started; CREATE TABLE of each partition lands in the role's schema).
      expect(outcome.status === 201 || 'refused' in outcome).toBe(true);
    }, 60_000);
  },
);
