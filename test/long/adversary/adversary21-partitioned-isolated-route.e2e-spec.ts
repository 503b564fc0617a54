import { Body, Controller, type INestApplication, Module, Post } from '@nestjs/common';
import { type Pool } from 'pg';
import request from 'supertest';
import {
  IdempotencyModule,
  Idempotent,
  PartitionIdempotencyKeys1764461600000,
} from '../../../lib/index.js';
import { bootstrapTestApp } from '../../support/bootstrap.js';
import { createMigratedDatabase, type MigratedDatabase } from '../../support/migrated-database.js';
import { createTestPool, endTestPool } from '../../support/test-pool.js';

/**
 * Adversary, round 21: on the partitioned layout (`partitionedExpiry`), a `oneCommit` route
 * with `isolationLevel: 'REPEATABLE READ'` (or SERIALIZABLE) answers every request 500
 * `database_permanent`, for ever; start-up accepts it.
 *
 * What the app does (Express, pool, migrations incl. PartitionIdempotencyKeys): `POST /orders`
 * is `@Idempotent({ oneCommit: true, isolationLevel: 'REPEATABLE READ' })` and inserts a row.
 * A client posts a new key, then retries it.
 *
 * What happens: claim-with-work.ts:30 gives the request's transaction the route's level
 * before the claim, and request-transaction.ts `beginWithClaim` runs the claim
 * (`idempotency_claim()`, partitioned-postgres-claim.store.ts `claimStatement`) as the first
 * statement of that transaction. The function refuses anything but READ COMMITTED (migration
 * 1764461600000, CLAIM_FUNCTION: `RAISE ... USING ERRCODE = '55000'`, "a claim of the same
 * key committed meanwhile would be missed and the key claimed twice"); postgres-claim.store.ts
 * :149-155 turns it into a PermanentDatabaseError: 500 on every request, the log telling the
 * operator to set default_transaction_isolation back to read committed, which it is.
 * route-problem.ts `claimStoreProblem` checks oneCommit against the store's kind and
 * `atomic`, not against the layout and the route's level.
 *
 * What should happen: `isolationLevel`'s doc comment: "The isolation level the request's
 * transaction begins at (its reads then run in it too)"; oneCommit's: "one commit per new key
 * instead of two", refused at start-up only "on a store outside PostgreSQL, on a route that is
 * not atomic, on a GraphQL mutation" (route-problem.ts). Either the route works (the claim
 * before the level, e.g. committed alone as `commitClaimAlone` does for a nested level) or
 * start-up refuses it with the reason. Control: the same route without oneCommit (its claim
 * runs apart, in READ COMMITTED): 201, then the replay, one row.
 *
 * Why it matters: turning oneCommit on for a money route (the routes that ask for REPEATABLE
 * READ or SERIALIZABLE) on the partitioned layout takes the route down completely, with a
 * "permanent" error whose hint is wrong. Severity: medium (total outage of the route, no
 * double effect; shows on the first request).
 */
let pool: Pool;

function moduleFor(oneCommit: boolean) {
  @Controller()
  class OrdersController {
    @Post('orders')
    @Idempotent({ oneCommit, isolationLevel: 'REPEATABLE READ' })
    async create(@Body() body: { text: string }) {
      await pool.query('INSERT INTO notes (text) VALUES ($1)', [body.text]);
      return { text: body.text };
    }
  }
  @Module({
    imports: [
      IdempotencyModule.forRootAsync({
        useFactory: () => ({
          globalKeys: true,
          pool,
          partitionedExpiry: { partitionMs: 3_600_000, partitionsAhead: 1 },
        }),
      }),
    ],
    controllers: [OrdersController],
  })
  class OrdersModule {}
  return OrdersModule;
}

async function scenario(oneCommit: boolean) {
  const database: MigratedDatabase = await createMigratedDatabase(
    `adv21_part_${oneCommit ? 'one' : 'two'}`,
    [PartitionIdempotencyKeys1764461600000],
  );
  let app: INestApplication | undefined;
  try {
    await database.dataSource.query(
      'CREATE TABLE notes (id serial PRIMARY KEY, text text NOT NULL)',
    );
    pool = createTestPool({ connectionString: database.url, max: 4 });
    pool.on('error', () => undefined);
    app = await bootstrapTestApp(moduleFor(oneCommit), 'express');
    const post = () =>
      request(app!.getHttpServer())
        .post('/orders')
        .set('Idempotency-Key', 'order-1')
        .send({ text: 'order-1' });
    const first = await post();
    const again = await post();
    const [{ count }] = (await database.dataSource.query(
      `SELECT count(*)::int AS count FROM notes WHERE text = 'order-1'`,
    )) as { count: number }[];
    return {
      first: { status: first.status, body: first.body as unknown },
      again: again.status,
      count,
    };
  } finally {
    await app?.close();
    await endTestPool(pool);
    await database.drop();
  }
}

describe('adversary 21: oneCommit on the partitioned layout at REPEATABLE READ', () => {
  it('a new key runs and replays (oneCommit)', async () => {
    const outcome = await scenario(true);
    expect(outcome.first.status).toBe(201);
    expect(outcome.again).toBe(201);
    expect(outcome.count).toBe(1);
  }, 30_000);

  it('control: without oneCommit', async () => {
    const outcome = await scenario(false);
    expect(outcome.first.status).toBe(201);
    expect(outcome.again).toBe(201);
    expect(outcome.count).toBe(1);
  }, 30_000);
});
