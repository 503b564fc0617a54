import { Body, Controller, type INestApplication, Module, Post } from '@nestjs/common';
import { type Client, type Pool } from 'pg';
import request from 'supertest';
import { IdempotencyModule, Idempotent } from '../../../lib/index.js';
import { type PoolApp, startPoolApp } from '../../support/pool-app.js';

/**
 * Adversary, round 8: round 7 (2680834) keeps a 25006 "passed on from another server (dblink,
 * postgres_fdw)" an outage to retry, and tells it by the error's context:
 * `/dblink|remote SQL command|foreign/i` on `where` (`isRemote`, request-transaction.ts). But
 * a local PL/pgSQL function's context holds its own name and the text of the statement that
 * failed, so a function of the app's that merely has "foreign" in its name (or writes a table
 * named so: `foreign_payments`, `foreign_exchange_orders`) is taken for a remote server.
 *
 * What a user does: the round 6 scenario (adversary6-read-only-then-write, fixed): a report
 * function that guards itself with `set_config('transaction_read_only', 'on', true)`
 * (harmless in autocommit), then the handler's write, made by its function
 * `record_foreign_payment($1)` (a payments app: foreign-currency payments).
 * What happens: 503 `store_unavailable` with `Retry-After: 1`, nothing stored, on every retry
 * for ever. The same function named `record_payment`: 500, as the guide promises.
 * What should happen: transactions.md: the mode set inside a function of the app's is "500
 * `database_permanent`, no `Retry-After` … meets the same answer, never a 503" (or 201, as
 * without the library, where the mode ends with the report's statement).
 */
let pool: Pool;

@Controller()
class PaymentsController {
  @Post('pay')
  @Idempotent()
  async pay(@Body() body: { ref: string; fn: string }) {
    await pool.query('SELECT guarded_report()');
    await pool.query(`SELECT ${body.fn}($1)`, [body.ref]);
    return { ref: body.ref };
  }

  @Post('plain/pay')
  async plainPay(@Body() body: { ref: string; fn: string }) {
    await pool.query('SELECT guarded_report()');
    await pool.query(`SELECT ${body.fn}($1)`, [body.ref]);
    return { ref: body.ref };
  }
}

@Module({
  imports: [IdempotencyModule.forRootAsync({ useFactory: () => ({ globalKeys: true, pool }) })],
  controllers: [PaymentsController],
})
class PaymentsModule {}

describe('adversary 8: a local function named "foreign…" is taken for a remote server', () => {
  let fixture: PoolApp;
  let admin: Client;
  let app: INestApplication;

  beforeAll(async () => {
    fixture = await startPoolApp('adv8_remote_by_name', {
      module: PaymentsModule,
      max: 3,
      usePool: (started) => (pool = started),
      setup: async (owner) => {
        await owner.query('CREATE TABLE payments (id serial PRIMARY KEY, ref text NOT NULL)');
        await owner.query(`CREATE FUNCTION guarded_report() RETURNS int LANGUAGE plpgsql AS $$
          BEGIN
            PERFORM set_config('transaction_read_only', 'on', true);
            RETURN (SELECT count(*) FROM payments);
          END $$`);
        for (const name of ['record_payment', 'record_foreign_payment']) {
          await owner.query(`CREATE FUNCTION ${name}(r text) RETURNS void LANGUAGE plpgsql AS $$
            BEGIN INSERT INTO payments (ref) VALUES (r); END $$`);
        }
      },
    });
    ({ admin, app } = fixture);
  });

  afterAll(() => fixture?.close());

  const post = (path: string, key: string, body: object) =>
    request(app.getHttpServer()).post(path).set('Idempotency-Key', key).send(body);
  const kept = async (ref: string) =>
    (await admin.query('SELECT 1 FROM payments WHERE ref = $1', [ref])).rows.length;

  it('without the library: 201, one row (the mode ends with the report)', async () => {
    const answer = await post('/plain/pay', 'plain', {
      ref: 'plain',
      fn: 'record_foreign_payment',
    });
    expect({ status: answer.status, kept: await kept('plain') }).toEqual({ status: 201, kept: 1 });
  });

  it.each([['record_payment'], ['record_foreign_payment']])(
    'with it, the write made by %s(): never a 503 with Retry-After',
    async (fn) => {
      const ref = `key-${fn}`;
      const first = await post('/pay', ref, { ref, fn });
      const retry = await post('/pay', ref, { ref, fn });
      // Observed: record_payment 500 both times (the handler's own 25006, stored);
      // record_foreign_payment 503 store_unavailable, Retry-After: 1, both times.
      expect({
        first: first.status,
        retry: retry.status,
        retryAfter: first.headers['retry-after'] as string | undefined,
      }).toEqual({ first: 500, retry: 500, retryAfter: undefined });
    },
    30_000,
  );
});
