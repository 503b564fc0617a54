/**
 * Adversary 78 (pool): a handler on the raw pool (Drizzle, Prisma's `$queryRaw`, `pool.query`)
 * that bounds its own slow statement by cancelling it, the cancel sent from
 * `IdempotentTransaction.outside()` (the only place its code can reach a second connection:
 * `pool.query()` in the request runs behind the very statement it means to cancel), is answered
 * 503 `database_transient` with `Retry-After`, and every retry meets the same 503, where the
 * same cancel sent through a client of the pool made in the request (`new pool.Client()`, as
 * Kysely's abort does) is the documented 500 `transaction_aborted`.
 *
 *   await pool.query('INSERT INTO orders (sku) VALUES ($1)', [sku]);
 *   const { rows: [{ pid }] } = await pool.query('SELECT pg_backend_pid() AS pid');
 *   const watchdog = setTimeout(() => IdempotentTransaction.outside(() =>
 *     pool.query('SELECT pg_cancel_backend($1)', [pid])), 300);
 *   try { await pool.query('SELECT pg_sleep(3)'); } catch { } finally { clearTimeout(watchdog); }
 *
 * Why: lib/data-layers/cancel-watch.ts notes a `pg_cancel_backend(<pid>)` through
 * `transactionScope.getStore()?.cancelAsked?.(asked)`. Inside `outside()` the store is an
 * `OutsideScope` (lib/data-layers/outside-scope.ts), which has no `cancelAsked` and does not
 * pass it to the request it came from (it keeps it as `from`, for connect deadlines only). The
 * request's connection is never noted, its 57014 never marked, and lib/transaction/failure.ts
 * answers the passing 503. The retry runs the same watchdog: 503 for ever.
 *
 * Docs: docs/guides/data-layers.md: "A statement cancelled, or the request's connection ended,
 * by the request's own code (`pg_cancel_backend` or `pg_terminate_backend` of the request's
 * backend, sent through the pool's clients in the request ...) is no passing failure: it ends
 * the request's transaction, which answers 500 `transaction_aborted` (nothing stored; the retry
 * meets the same cancel)". The cancel here is sent by the handler, through the pool's own
 * clients, during the request; only the data layers' "someone else" list (an operator, a
 * pooler, a shutdown, a `controlClient` of another class, a protocol cancel) is a 503.
 *
 * Severity: medium (a false "retry later" answered for ever to a request whose every retry
 * fails the same way; nothing committed twice).
 *
 * Failed before the fix: the cancel from `outside()` answers 503 `database_transient` twice. Control: the
 * same cancel sent from `new pool.Client()` in the request's scope answers 500
 * `transaction_aborted` twice, as documented.
 *
 * Suggested fix: `OutsideScope` forwards `cancelAsked` to the request it was left from
 * (`this.from?.cancelAsked?.(asked)`), as it forwards connect deadlines; the pid check in
 * `RequestTransaction.cancelAsked` already keeps other backends out.
 *
 * Fixed: `OutsideScope.cancelAsked` (lib/data-layers/outside-scope.ts) passes the cancel to the
 * request it was left from, whose pid check keeps other backends out.
 */
import { Body, Controller, HttpCode, Module, Post } from '@nestjs/common';
import { type Pool } from 'pg';
import request from 'supertest';
import { IdempotencyModule, Idempotent, IdempotentTransaction } from '../../../lib/index.js';
import { type PoolApp, startPoolApp } from '../../support/pool-app.js';

let pool: Pool;

type From = 'outside' | 'control-client';

async function cancelBackend(pid: number, from: From) {
  if (from === 'outside') {
    await IdempotentTransaction.outside(() => pool.query('SELECT pg_cancel_backend($1)', [pid]));
    return;
  }
  const Control = (pool as unknown as { Client: new (options: unknown) => import('pg').Client })
    .Client;
  const control = new Control(pool.options);
  await control.connect();
  try {
    await control.query('SELECT pg_cancel_backend($1)', [pid]);
  } finally {
    await control.end();
  }
}

@Controller('orders')
class OrdersController {
  @Post()
  @HttpCode(201)
  @Idempotent()
  async place(@Body() body: { sku: string; from: From }) {
    await pool.query('INSERT INTO orders (sku) VALUES ($1)', [body.sku]);
    const { rows } = await pool.query<{ pid: number }>('SELECT pg_backend_pid() AS pid');
    const watchdog = setTimeout(() => {
      cancelBackend(rows[0].pid, body.from).catch(() => undefined);
    }, 300);
    try {
      await pool.query('SELECT pg_sleep(3)');
    } catch {
      // bounded: answer without it
    } finally {
      clearTimeout(watchdog);
    }
    return { sku: body.sku };
  }
}

describe('adversary 78 pool: the request cancels its own statement from outside()', () => {
  let fixture: PoolApp;

  beforeAll(async () => {
    @Module({
      imports: [IdempotencyModule.forRootAsync({ useFactory: () => ({ globalKeys: true, pool }) })],
      controllers: [OrdersController],
    })
    class OrdersModule {}
    fixture = await startPoolApp('adv78_pool_outside_cancel', {
      module: OrdersModule,
      max: 4,
      usePool: (started) => {
        pool = started;
      },
      setup: async (owner) => {
        await owner.query(`CREATE TABLE orders (id bigserial PRIMARY KEY, sku text NOT NULL)`);
      },
    });
  }, 60_000);

  afterAll(async () => {
    await fixture?.close();
  });

  async function post(sku: string, from: From) {
    const answer = await request(fixture.app.getHttpServer())
      .post('/orders')
      .set('Idempotency-Key', `key-${sku}`)
      .send({ sku, from })
      .timeout(30_000);
    return { status: answer.status, code: (answer.body as { code?: string }).code };
  }

  it('control: the cancel sent from a client of the pool made in the request is 500', async () => {
    const first = await post('control', 'control-client');
    const retried = await post('control', 'control-client');
    expect({ first, retried }).toEqual({
      first: { status: 500, code: 'transaction_aborted' },
      retried: { status: 500, code: 'transaction_aborted' },
    });
  }, 60_000);

  it('the same cancel sent from IdempotentTransaction.outside() is 500 transaction_aborted', async () => {
    const first = await post('outside', 'outside');
    const retried = await post('outside', 'outside');
    expect({ first, retried }).toEqual({
      first: { status: 500, code: 'transaction_aborted' },
      retried: { status: 500, code: 'transaction_aborted' },
    });
  }, 60_000);
});
