/**
 * Fixed (session of 2026-12-07, third): under partitionedExpiry the start-up check reads
 * whether the app's role has the keys table owner's privileges (`pg_has_role(relowner,
 * 'USAGE')`) and CREATE on its schema, and refuses without them, naming the GRANTs (GRANT
 * <owner> TO <role>; GRANT CREATE ON SCHEMA ...) or logging in as the owner
 * (lib/schema/schema-check.ts `partitionMakerProblem`); said alone, without the migrations.
 *
 * Adversary 109 (pool): with `partitionedExpiry`, an app whose login role is not the owner of
 * `idempotency_keys` (the ordinary least-privilege set-up: migrations run as the owner, the app
 * granted SELECT, INSERT, UPDATE, DELETE) passes the start-up check and starts, then answers
 * every keyed request 500: the partitions ahead are made by the app's own sessions
 * (`idempotency_keys_create_partitions`: CREATE TABLE in the schema and ALTER TABLE
 * idempotency_keys ATTACH PARTITION, which PostgreSQL allows only to the table's owner), and
 * the migration leaves no partition past its own time (`... TO (now() + 1 ms)`).
 *
 * User code (docs/operations/partitioned-expiry.md "Opting in", the app's role its own):
 *   migrations run as the owner: [...IDEMPOTENCY_MIGRATIONS, PartitionIdempotencyKeys1764461600000]
 *   GRANT ALL ON ALL TABLES IN SCHEMA public TO app;
 *   IdempotencyModule.forRootAsync({ useFactory: () => ({ globalKeys: true, pool, partitionedExpiry: true }) })
 *   with `pool` a pg.Pool logging in as `app`.
 *
 * Code path: lib/idempotency-schema.check.ts / lib/schema/schema-check.ts `missingSchema` (checks
 * the DML privileges on the tables only: no ownership of idempotency_keys, no CREATE on its
 * schema, which the partitioned layout needs); lib/claim/partitioned/partitioned-postgres-claim.store.ts
 * `ensurePartitions` -> `createPartitions` -> migrations/partition-functions.ts
 * CREATE_PARTITIONS_FUNCTION (CREATE TABLE, ATTACH PARTITION: 42501 "must be owner of table
 * idempotency_keys" / "permission denied for schema public").
 *
 * Docs quote: the brief/README promise "every misconfiguration fails at start-up with what to
 * do"; docs/reference/start-up-checks.md lists the privileges as checked at start-up
 * ("the role ... may not ...: GRANT ..."), and docs/operations/partitioned-expiry.md says
 * nothing of the role needing to own the table.
 *
 * Severity: medium (a broken app started: every keyed request 500 until the role is changed;
 * nothing executed twice).
 *
 * Fails now: (un-skipped) the app starts, and `POST /orders` with a key answers 500. The log
 * (TEST_LOGS=1) says `idempotency store call idempotency_create_partitions_v1 failed: error:
 * permission denied for schema public`, then the wrong remedy: `grant the app's role SELECT,
 * INSERT, UPDATE, DELETE on the library's tables (...)`, which the role has already (GRANT ALL);
 * with CREATE on the schema granted, ATTACH PARTITION fails next: it needs the table's owner.
 *
 * Controls: the same app logging in as the owner: 201.
 *
 * Suggested fix: have the start-up check (under partitionedExpiry) check that the role may make
 * and attach partitions (`pg_has_role(current_user, c.relowner, 'USAGE')` on idempotency_keys
 * and `has_schema_privilege(n.oid, 'CREATE')`), refusing with the remedy (ALTER TABLE
 * idempotency_keys OWNER TO …, GRANT CREATE ON SCHEMA …, or GRANT <owner> TO <role>); or make
 * `idempotency_keys_create_partitions` SECURITY DEFINER (with a pinned search_path), and say so
 * in docs/operations/partitioned-expiry.md.
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

/** Starts the app as `user` (undefined: the owner) and sends one keyed request. */
async function story(database: MigratedDatabase, user?: string) {
  const url = new URL(database.url);
  if (user) {
    url.username = user;
    url.password = '';
  }
  pool = createTestPool({ connectionString: url.toString(), max: 2 });
  pool.on('error', () => undefined);
  let app: INestApplication | undefined;
  try {
    app = await bootstrapTestApp(OrdersModule, 'express').catch((error: unknown) => {
      return { refused: String(error) } as unknown as INestApplication;
    });
    if ('refused' in app) return { refused: true };
    const answer = await request(app.getHttpServer())
      .post('/orders')
      .set('Idempotency-Key', `k-${randomBytes(4).toString('hex')}`);
    return { status: answer.status };
  } finally {
    if (app && !('refused' in app)) await app.close();
    await endTestPool(pool);
  }
}

describePartitioned('adversary 109 pool: partitionedExpiry with an app role not the owner', () => {
  // One database each: the first app to start makes the partitions ahead for the other.
  let owned: MigratedDatabase;
  let database: MigratedDatabase;
  const role = `adv109_app_${randomBytes(4).toString('hex')}`;

  beforeAll(async () => {
    owned = await createMigratedDatabase('adv109_pool_part_owner', [
      PartitionIdempotencyKeys1764461600000,
    ]);
    database = await createMigratedDatabase('adv109_pool_part_role', [
      PartitionIdempotencyKeys1764461600000,
    ]);
    await database.dataSource.query(`CREATE ROLE ${role} LOGIN`);
    await database.dataSource.query(`GRANT ALL ON ALL TABLES IN SCHEMA public TO ${role}`);
    await database.dataSource.query(`GRANT ALL ON ALL SEQUENCES IN SCHEMA public TO ${role}`);
  }, 120_000);

  afterAll(async () => {
    await owned?.drop();
    await database?.drop();
    const root = new Client({ connectionString: adminUrl() });
    await root.connect();
    await root.query(`DROP ROLE IF EXISTS ${role}`);
    await root.end();
  });

  it('control: the app logging in as the owner answers 201', async () => {
    expect(await story(owned)).toEqual({ status: 201 });
  }, 60_000);

  it('an app role that may not make partitions is refused at start-up, or served', async () => {
    const outcome = await story(database, role);
    // Observed: { status: 500 } (the app started; the partitions ahead cannot be made).
    expect([{ refused: true }, { status: 201 }]).toContainEqual(outcome);
  }, 60_000);
});
