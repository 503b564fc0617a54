import { Body, Controller, Module, Post } from '@nestjs/common';
import { type Pool } from 'pg';
import request from 'supertest';
import { IdempotencyModule, Idempotent } from '../../../lib/index.js';
import { type PoolApp, startPoolApp } from '../../support/pool-app.js';

/**
 * Adversary, round 27: after a migration that changes the type of a column the claim returns,
 * a `oneCommit` route answers 503 to every request on every connection that had prepared the
 * claim, for as long as the connection lives (a busy pool's connections never idle out), while
 * the same app's default route recovers after one 503.
 *
 * What the app does (Express, pg pool of 2, as a user would write it): `POST /transfers` with
 * `@Idempotent({ oneCommit: true })` inserts a row. Its traffic runs; meanwhile the DBA applies a
 * migration to the keys' table that changes the type of a column the claim reads
 * (`ALTER TABLE idempotency_keys ALTER COLUMN response_code TYPE bigint`; any DDL that changes
 * the claim's result type, e.g. a library upgrade's `idempotency_claim()` with new columns
 * behind the partitioned layout's `c.*`, does the same).
 *
 * What happens: the claim runs as `EXECUTE idempotency_claim_v5_in_text(...)` of a statement the
 * session prepared once (lib/transaction/claim-at-begin.ts:32-37, claimStatements). PostgreSQL
 * re-plans it after the DDL and refuses it: 0A000 "cached plan must not change result type".
 * lib/transaction/request-transaction.ts:274-280 only sets right 26000/42P05 (notePrepared,
 * claim-at-begin.ts:44-51, learns nothing from 0A000 and keeps the name as prepared); the
 * claim's failure rolls the transaction back (request-transaction.ts:289-291) and
 * rollbackOn/end (request-transaction.ts:699-723) give the connection back to the pool as
 * healthy, its stale prepared statement still there. lib/claim/postgres-claim.store.ts:165
 * turns the error into 503 store_unavailable ("Retry later"), and every retry meets the same
 * connection's same statement: 503 again, forever. The default route's claim, on a statement
 * of its own that fails the same way once, runs through IdempotencyDatabase.withConnection
 * (lib/data-layers/idempotency-database.ts:365-374), which closes a connection whose work failed:
 * one 503, then the next connection prepares afresh.
 *
 * What is expected: as on the default route (the control below), the claim recovers: at most
 * one 503 (better none: DEALLOCATE and PREPARE again, or drop the connection, on 0A000), then
 * the request runs once and answers 201.
 *
 * Severity: medium (a retryable 503 that never stops being returned on a route, until restart).
 */
let pool: Pool;

@Controller()
class TransfersController {
  @Post('one-commit')
  @Idempotent({ oneCommit: true })
  async oneCommit(@Body() body: { ref: string }) {
    const { rows } = await pool.query<{ id: number }>(
      'INSERT INTO transfers (ref) VALUES ($1) RETURNING id',
      [body.ref],
    );
    return { id: rows[0].id, ref: body.ref };
  }

  @Post('default')
  @Idempotent()
  async plain(@Body() body: { ref: string }) {
    const { rows } = await pool.query<{ id: number }>(
      'INSERT INTO transfers (ref) VALUES ($1) RETURNING id',
      [body.ref],
    );
    return { id: rows[0].id, ref: body.ref };
  }
}

@Module({
  imports: [IdempotencyModule.forRootAsync({ useFactory: () => ({ globalKeys: true, pool }) })],
  controllers: [TransfersController],
})
class TransfersModule {}

describe('adversary 27: a claim prepared before a column-type migration 503s forever on oneCommit', () => {
  it.each([
    ['control: the default route recovers after the migration', 'default'],
    ['a oneCommit route recovers after the migration', 'one-commit'],
  ] as const)(
    '%s',
    async (_name, route) => {
      const fixture: PoolApp = await startPoolApp(`adv27_stale_${route.replace('-', '_')}`, {
        module: TransfersModule,
        max: 2,
        usePool: (started) => (pool = started),
        setup: async (admin) => {
          await admin.query('CREATE TABLE transfers (id serial PRIMARY KEY, ref text NOT NULL)');
        },
      });
      try {
        const send = (key: string) =>
          request(fixture.app.getHttpServer())
            .post(`/${route}`)
            .set('Idempotency-Key', key)
            .send({ ref: key });
        const count = async (ref: string) =>
          Number(
            (await fixture.admin.query('SELECT count(*) FROM transfers WHERE ref = $1', [ref]))
              .rows[0].count,
          );
        // Traffic before the migration: the pool's connections have the claim prepared.
        for (let i = 0; i < 4; i++) expect((await send(`${route}-before-${i}`)).status).toBe(201);
        await fixture.admin.query(
          'ALTER TABLE idempotency_keys ALTER COLUMN response_code TYPE bigint',
        );
        // A client retrying the same key, as a 503 "Retry later" tells it to.
        const statuses: number[] = [];
        let last = await send(`${route}-after`);
        statuses.push(last.status);
        for (let attempt = 0; attempt < 7 && last.status === 503; attempt++) {
          last = await send(`${route}-after`);
          statuses.push(last.status);
        }
        // Other new keys after that.
        for (let i = 0; i < 4; i++) statuses.push((await send(`${route}-later-${i}`)).status);
        if (process.env.ADV_DEBUG) {
          // What the pooled connections meet (here: 0A000 on the one-commit route's statement).
          const client = await pool.connect();
          const met = await client
            .query(
              "EXECUTE idempotency_claim_v5_in_text('t'::text, 'k'::text, '\\x00'::bytea, 1000::float8)",
            )
            .then(
              () => 'ran',
              (error: { code?: string; message?: string }) => `${error.code} ${error.message}`,
            );
          await client.query('ROLLBACK').catch(() => undefined);
          client.release(true);
          console.log(route, statuses, last.body, met);
        }
        // Received on one-commit: [503 x 8, 503, 503, 503, 503], code store_unavailable.
        expect(statuses.filter((status) => status === 503).length).toBeLessThanOrEqual(1);
        expect(last.status).toBe(201);
        expect(await count(`${route}-after`)).toBe(1);
      } finally {
        await fixture.close();
      }
    },
    60_000,
  );
});
