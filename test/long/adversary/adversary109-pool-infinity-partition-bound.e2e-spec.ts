/**
 * Fixed (session of 2026-12-07, third): the start-up check refuses a partition of
 * idempotency_keys without an end, up to MAXVALUE or 'infinity' alike (the catalog query lists
 * them from `pg_get_expr(relpartbound)`; lib/schema/schema-check.ts `unboundedPartitionProblem`),
 * saying how to give it an end (DETACH, then ATTACH ... TO (now())) or drop it if empty; the
 * doctor's partitions finding fails on one too. The functions are unchanged (no new migration):
 * an app with such a partition no longer starts, so never reaches the 22008. The control
 * (MAXVALUE) is refused now as well, where it was 201 (served, but never expired: see
 * adversary109-pool-maxvalue-partition-never-expires).
 *
 * Adversary 109 (pool): a partition made by hand up to `'infinity'` (the catch-all an operator
 * writes for a timestamptz range: `FOR VALUES FROM (…) TO ('infinity')`, as valid as MAXVALUE
 * to PostgreSQL) makes `idempotency_keys_create_partitions()` fail on every call: it follows the
 * covering partition's end (`t := covering_to`, 'infinity', not NULL as MAXVALUE is), leaves
 * its loop, and returns `extract(epoch FROM t - clock_timestamp())`: 22008 "cannot subtract
 * infinite timestamps". Each claim waits for the partitions ahead (none known yet) and fails:
 * the app starts (the start-up check says nothing of it) and answers every keyed request 503
 * (or 500), for ever, though every row has a partition to go to. The purge fails too.
 *
 * User code (an operator's, ordinary PostgreSQL, after the documented migrations):
 *   CREATE TABLE idempotency_keys_rest PARTITION OF idempotency_keys
 *     FOR VALUES FROM ('<end of the last partition>') TO ('infinity');
 *   IdempotencyModule.forRootAsync({ useFactory: () => ({ globalKeys: true, pool, partitionedExpiry: true }) })
 *
 * Code path: migrations/partition-functions.ts CREATE_PARTITIONS_FUNCTION (`IF covering_to IS
 * NULL THEN RETURN 'infinity'` handles MAXVALUE only; `t := covering_to` then the final
 * `RETURN extract(epoch FROM t - clock_timestamp()) * 1000`); PARTITIONS_FUNCTION reads the
 * `'infinity'` bound as the timestamp infinity, not NULL; lib/claim/partitioned/
 * partitioned-postgres-claim.store.ts `ensurePartitions` ('wait' while nothing is known) ->
 * `createPartitions` rejects; lib/schema/schema-check.ts refuses a DEFAULT partition but not
 * this one.
 *
 * Docs quote: docs/operations/partitioned-expiry.md "Each purge makes the partitions ahead
 * (claims make them too ...)"; the brief: a misconfiguration fails at start-up with what to do,
 * and "a key stuck" / "a working app refused" are breaks.
 *
 * Severity: high (every keyed request fails for ever on a schema PostgreSQL accepts and the
 * start-up check passes; nothing in the log says the partition is the cause).
 *
 * Fails now: (un-skipped) the app starts and `POST /orders` with a key answers 503 (the log:
 * `cannot subtract infinite timestamps`).
 *
 * Controls: the same hand-made partition up to MAXVALUE: 201.
 *
 * Suggested fix: in both functions read an infinite bound as the catalog's MAXVALUE / MINVALUE
 * (`nullif(nullif(…::timestamptz, 'infinity'), '-infinity')` in `idempotency_key_partitions()`),
 * so `covering_to IS NULL` returns 'infinity'; or refuse such a partition at start-up, saying to
 * use MAXVALUE. A new migration re-makes the functions.
 */
import { randomBytes } from 'node:crypto';
import { Controller, type INestApplication, Logger, Module, Post } from '@nestjs/common';
import { type Pool } from 'pg';
import request from 'supertest';
import {
  IdempotencyModule,
  Idempotent,
  PartitionIdempotencyKeys1764461600000,
} from '../../../lib/index.js';
import { bootstrapTestApp } from '../../support/bootstrap.js';
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

/** The migrated database with an operator's partition from the last one's end up to `upTo`. */
async function databaseWith(label: string, upTo: string): Promise<MigratedDatabase> {
  const database = await createMigratedDatabase(label, [PartitionIdempotencyKeys1764461600000]);
  await database.dataSource.query(`DO $$ BEGIN
    EXECUTE format('CREATE TABLE idempotency_keys_rest PARTITION OF idempotency_keys '
      'FOR VALUES FROM (%L) TO (${upTo})',
      (SELECT max(to_at) FROM idempotency_key_partitions()));
  END $$`);
  return database;
}

/** Starts the app and sends one keyed request (or says it was refused). */
async function story(database: MigratedDatabase) {
  pool = createTestPool({ connectionString: database.url, max: 2 });
  pool.on('error', () => undefined);
  let app: INestApplication | undefined;
  try {
    try {
      app = await bootstrapTestApp(OrdersModule, 'express');
    } catch {
      return { refused: true };
    }
    const answer = await request(app.getHttpServer())
      .post('/orders')
      .set('Idempotency-Key', `k-${randomBytes(4).toString('hex')}`);
    return { status: answer.status };
  } finally {
    await app?.close();
    await endTestPool(pool);
  }
}

describePartitioned("adversary 109 pool: a hand-made partition up to 'infinity'", () => {
  let maxvalue: MigratedDatabase;
  let infinity: MigratedDatabase;

  beforeAll(async () => {
    maxvalue = await databaseWith('adv109_pool_part_maxvalue', 'MAXVALUE');
    infinity = await databaseWith('adv109_pool_part_infinity', `''infinity''`);
  }, 120_000);

  afterAll(async () => {
    await maxvalue?.drop();
    await infinity?.drop();
  });

  it('control: a partition up to MAXVALUE: refused at start-up too (adversary109-pool-maxvalue-partition-never-expires)', async () => {
    // Was 201: served, but no partition made ahead once it is live and never expired.
    expect(await story(maxvalue)).toEqual({ refused: true });
  }, 60_000);

  it("a partition up to 'infinity' is served, or refused at start-up", async () => {
    // Observed: { status: 503 } (cannot subtract infinite timestamps, on every claim).
    expect([{ refused: true }, { status: 201 }]).toContainEqual(await story(infinity));
  }, 60_000);
});
