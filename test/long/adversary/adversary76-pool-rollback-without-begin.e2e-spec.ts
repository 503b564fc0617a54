/**
 * Adversary 76: node-postgres code whose `catch` sends `ROLLBACK` whether or not its `BEGIN`
 * was reached (the usual `try { …; BEGIN; …; COMMIT } catch { ROLLBACK; throw }` shape, with a
 * check before the `BEGIN` that throws a 404) answers 500 in an `@Idempotent()` handler where it
 * answers its 404 without the library (PostgreSQL only warns: "there is no transaction in
 * progress"). The 404, a stable answer a retry should replay, is lost.
 *
 *   const client = await pool.connect();
 *   try {
 *     const { rows } = await client.query('SELECT id FROM accounts WHERE id = $1', [id]);
 *     if (rows.length === 0) throw new NotFoundException('no such account');
 *     await client.query('BEGIN');
 *     …
 *     await client.query('COMMIT');
 *   } catch (error) {
 *     await client.query('ROLLBACK');      // before BEGIN: a warning in PostgreSQL, nothing else
 *     throw error;
 *   } finally {
 *     client.release();
 *   }
 *
 * Why: `PoolTransaction.onView`, case 'rollback' → `innermost(view, 'ROLLBACK')`: the view has
 * no nested transaction open, so `if (!savepoint) throw this.refuse(statement)`: the request is
 * refused (as transaction control that would end the request's transaction) and the handler's
 * own `ROLLBACK` rejects, so its `throw error` is never reached: the answer is the refusal's
 * 500, not the handler's 404. Without the library the `ROLLBACK` outside a transaction block
 * succeeds (WARNING 25P01) and the 404 goes out.
 *
 * Expected (docs/guides/data-layers.md): "`pool.connect()` gives a view of the request's
 * connection. … `ROLLBACK` rolls back to it [the savepoint its `BEGIN` made]". With none open,
 * PostgreSQL's answer to a `ROLLBACK` is a warning; the docs' refusals are for control "sent
 * through `pool.query()` itself (not a nested transaction's own)" that would end the request's
 * transaction: a view's `ROLLBACK` with nothing open ends nothing.
 *
 * Control: without `@Idempotent()`: 404; keyed, the `catch` without the `ROLLBACK`: 404.
 *
 * Severity: medium (a false 500 stored or answered instead of the handler's stable 404; nothing
 * committed).
 *
 * Fails now: keyed, the catch with its ROLLBACK: 500 ("Internal server error": the refusal the
 * ROLLBACK rejects with) instead of 404; the two controls pass.
 *
 * Suggested fix: on a view with no nested transaction open, answer `ROLLBACK` (and `COMMIT`)
 * as PostgreSQL does outside a transaction block (an empty result, perhaps a logged warning),
 * without sending anything or refusing the request.
 *
 * Fixed: a view's `COMMIT`/`ROLLBACK` with none of its nested transactions open answers an
 * empty result, as PostgreSQL's warning does, and sends nothing (`PoolTransaction.onView`).
 */
import { Body, Controller, Inject, Module, NotFoundException, Post } from '@nestjs/common';
import { type Pool } from 'pg';
import request from 'supertest';
import { IdempotencyModule, Idempotent } from '../../../lib/index.js';
import { type PoolApp, startPoolApp } from '../../support/pool-app.js';

const POOL = Symbol('POOL');
let pool: Pool;

type Body76 = { id: number; noRollback?: boolean };

async function work(pool: Pool, { id, noRollback }: Body76) {
  const client = await pool.connect();
  try {
    const { rows } = await client.query('SELECT id FROM adv76prb_accounts WHERE id = $1', [id]);
    if (rows.length === 0) throw new NotFoundException('no such account');
    await client.query('BEGIN');
    await client.query('UPDATE adv76prb_accounts SET balance = balance + 1 WHERE id = $1', [id]);
    await client.query('COMMIT');
  } catch (error) {
    if (!noRollback) await client.query('ROLLBACK');
    throw error;
  } finally {
    client.release();
  }
  return { id };
}

@Controller()
class AccountsController {
  constructor(@Inject(POOL) private readonly pool: Pool) {}

  @Post('keyed')
  @Idempotent()
  keyed(@Body() body: Body76) {
    return work(this.pool, body);
  }

  @Post('plain')
  plain(@Body() body: Body76) {
    return work(this.pool, body);
  }
}

@Module({
  imports: [IdempotencyModule.forRootAsync({ useFactory: () => ({ globalKeys: true, pool }) })],
  controllers: [AccountsController],
  providers: [{ provide: POOL, useFactory: () => pool }],
})
class AccountsModule {}

describe('adversary 76: ROLLBACK on a client of the pool with no transaction begun', () => {
  let fixture: PoolApp;

  beforeAll(async () => {
    fixture = await startPoolApp('adv76_rollback_no_begin', {
      module: AccountsModule,
      max: 4,
      usePool: (started) => {
        pool = started;
      },
      setup: async (admin) => {
        await admin.query(`
          CREATE TABLE adv76prb_accounts (id int PRIMARY KEY, balance int NOT NULL);
          INSERT INTO adv76prb_accounts VALUES (1, 0);`);
      },
    });
  }, 60_000);

  afterAll(async () => {
    await fixture?.close();
  });

  const post = (path: string, key: string | undefined, body: Body76) => {
    const call = request(fixture.app.getHttpServer()).post(path);
    if (key) call.set('Idempotency-Key', key);
    return call.send(body);
  };

  it('control: without @Idempotent(): 404', async () => {
    const answer = await post('/plain', undefined, { id: 42 });
    expect(answer.status).toBe(404);
  }, 30_000);

  it('control: keyed, the catch without its ROLLBACK: 404', async () => {
    const answer = await post('/keyed', 'keyed-no-rollback', { id: 42, noRollback: true });
    expect(answer.status).toBe(404);
  }, 30_000);

  it('keyed, the catch with its ROLLBACK: 404, as without the library', async () => {
    const answer = await post('/keyed', 'keyed-rollback', { id: 42 });
    expect({
      status: answer.status,
      body: answer.status === 404 ? undefined : (answer.body as unknown),
    }).toEqual({ status: 404, body: undefined });
  }, 30_000);
});
