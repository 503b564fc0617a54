import { Body, Controller, Module, Post } from '@nestjs/common';
import { type Pool } from 'pg';
import request from 'supertest';
import { IdempotencyModule, Idempotent } from '../../../lib/index.js';
import { type PoolApp, startPoolApp } from '../../support/pool-app.js';

/**
 * What a user does (pg itself on the pool given to the library, docs/guides/data-layers.md
 * "pg itself"): bills the open invoices of each account given, one transaction per account,
 * walking them with a server-side cursor (`DECLARE open_invoices CURSOR FOR …`, then `FETCH
 * 100` until empty: the usual way to page through many rows without holding them all).
 * PostgreSQL closes a cursor declared without `WITH HOLD` at its transaction's COMMIT, so the
 * code does not close it, and the next account's transaction declares it again.
 *
 * What happens: inside a request each account's transaction is a savepoint, and its `RELEASE
 * SAVEPOINT` closes no cursor: the first account's cursor is still open when the second
 * account's transaction declares it, and PostgreSQL refuses (42P03 `cursor "open_invoices"
 * already exists`). The request answers 500, nothing billed, and that 500 is the key's answer.
 *
 * What should happen: as without the library: each cursor ends with its transaction's COMMIT;
 * 201 once, every invoice of both accounts billed.
 */
let pool: Pool;
const poolOf = () => pool;

async function bill(body: { accounts: string[] }) {
  let billed = 0;
  for (const account of body.accounts) {
    const client = await pool.connect();
    try {
      await client.query('BEGIN');
      await client.query(
        'DECLARE open_invoices CURSOR FOR SELECT id FROM invoices WHERE account = $1 AND NOT billed',
        [account],
      );
      for (;;) {
        const { rows } = await client.query<{ id: number }>('FETCH 100 FROM open_invoices');
        if (rows.length === 0) break;
        await client.query('UPDATE invoices SET billed = true WHERE id = ANY($1)', [
          rows.map((row) => row.id),
        ]);
        billed += rows.length;
      }
      await client.query('COMMIT');
    } catch (error) {
      await client.query('ROLLBACK');
      throw error;
    } finally {
      client.release();
    }
  }
  return { billed };
}

@Controller()
class BillingController {
  @Post('plain')
  plain(@Body() body: { accounts: string[] }) {
    return bill(body);
  }

  @Post('idempotent')
  @Idempotent()
  idempotent(@Body() body: { accounts: string[] }) {
    return bill(body);
  }
}

@Module({
  imports: [
    IdempotencyModule.forRootAsync({ useFactory: () => ({ globalKeys: true, pool: poolOf() }) }),
  ],
  controllers: [BillingController],
})
class BillingModule {}

describe('adversary 10: a cursor of a nested transaction stays open past its COMMIT', () => {
  let fixture: PoolApp;

  beforeAll(async () => {
    fixture = await startPoolApp('adv10_cursor_outlives', {
      module: BillingModule,
      usePool: (started) => {
        pool = started;
      },
      setup: async (admin) => {
        await admin.query(
          'CREATE TABLE invoices (id serial PRIMARY KEY, account text NOT NULL, ' +
            'billed boolean NOT NULL DEFAULT false)',
        );
        await admin.query(
          "INSERT INTO invoices (account) SELECT a FROM (VALUES ('p1'), ('p2'), ('a1'), ('a2')) " +
            'AS v(a), generate_series(1, 3)',
        );
      },
    });
  }, 60_000);

  afterAll(() => fixture?.close());

  const post = (path: string, accounts: string[], key?: string) => {
    const call = request(fixture.app.getHttpServer()).post(path);
    return (key ? call.set('Idempotency-Key', key) : call).send({ accounts });
  };

  const unbilled = async (accounts: string[]) => {
    const { rows } = await fixture.admin.query(
      'SELECT count(*)::int AS n FROM invoices WHERE account = ANY($1) AND NOT billed',
      [accounts],
    );
    return rows[0].n as number;
  };

  it('without the library (no @Idempotent): 201, both accounts billed (control)', async () => {
    const answer = await post('/plain', ['p1', 'p2']);
    expect({ status: answer.status, body: answer.body as unknown }).toEqual({
      status: 201,
      body: { billed: 6 },
    });
    expect(await unbilled(['p1', 'p2'])).toBe(0);
  }, 30_000);

  it('under @Idempotent(): 201 once, both accounts billed', async () => {
    const answer = await post('/idempotent', ['a1', 'a2'], 'key-1');
    expect({
      status: answer.status,
      body: answer.body as unknown,
      unbilled: await unbilled(['a1', 'a2']),
    }).toEqual({ status: 201, body: { billed: 6 }, unbilled: 0 });
  }, 30_000);
});
