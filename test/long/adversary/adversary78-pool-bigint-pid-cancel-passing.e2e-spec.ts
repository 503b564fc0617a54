/**
 * Adversary 78 (pool): the request's own cancel of its statement, sent through a client of the
 * pool made in the request (the route data-layers.md documents as the app's own) with the pid
 * as a BigInt parameter (`pg_cancel_backend($1)`, `[BigInt(pid)]`: a pid carried as a bigint, as
 * code that keeps every integer id as a bigint, or reads it through an `int8` cast, has it) is
 * answered 503 `database_transient` with `Retry-After`, and every retry meets it again; the same
 * pid as a number is the documented 500 `transaction_aborted`.
 *
 *   const control = new (pool as any).Client(pool.options); await control.connect();
 *   await control.query('SELECT pg_cancel_backend($1)', [BigInt(pid)]);
 *
 * Why: lib/connection/cancel-asked.ts `cancelsAskedIn` reads a parameter's pid only when it is
 * a number or a string of digits (`typeof pid !== 'number'` → skipped). node-postgres sends a
 * BigInt parameter as its digits (`prepareValue` → `toString()`), so PostgreSQL cancels the
 * statement, but the cancel is never noted on the request's connection and its 57014 is taken
 * for someone else's (lib/transaction/failure.ts: 503).
 *
 * Docs: docs/guides/data-layers.md: "A statement cancelled ... by the request's own code
 * (`pg_cancel_backend` or `pg_terminate_backend` of the request's backend, sent through the
 * pool's clients in the request ...) is no passing failure: ... 500 `transaction_aborted`".
 *
 * Severity: low (a bigint pid is uncommon: PostgreSQL's pids are int4, which node-postgres reads
 * as numbers; a false "retry later" for ever where it happens).
 *
 * Failed before the fix: the BigInt pid: 503 `database_transient` twice. Control: the same cancel with the
 * pid as a number: 500 `transaction_aborted` twice.
 *
 * Suggested fix: in `cancelsAskedIn`, take a `bigint` parameter too (`typeof raw === 'bigint'
 * ? Number(raw)`), within the safe-integer check.
 *
 * Fixed: `cancelsAskedIn` (lib/connection/cancel-asked.ts) reads a `bigint` parameter as its
 * number (within the safe-integer check), as node-postgres sends it; unit cases in cancel-
 * asked.spec.ts.
 */
import { Body, Controller, HttpCode, Module, Post } from '@nestjs/common';
import { type Pool } from 'pg';
import request from 'supertest';
import { IdempotencyModule, Idempotent } from '../../../lib/index.js';
import { type PoolApp, startPoolApp } from '../../support/pool-app.js';

let pool: Pool;

type From = 'number' | 'bigint';

async function cancelBackend(pid: number, from: From) {
  const Control = (pool as unknown as { Client: new (options: unknown) => import('pg').Client })
    .Client;
  const control = new Control(pool.options);
  await control.connect();
  try {
    await control.query('SELECT pg_cancel_backend($1)', [from === 'bigint' ? BigInt(pid) : pid]);
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

describe('adversary 78 pool: the request cancels its own statement, the pid a BigInt', () => {
  let fixture: PoolApp;

  beforeAll(async () => {
    @Module({
      imports: [IdempotencyModule.forRootAsync({ useFactory: () => ({ globalKeys: true, pool }) })],
      controllers: [OrdersController],
    })
    class OrdersModule {}
    fixture = await startPoolApp('adv78_pool_bigint_cancel', {
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

  it('control: the pid as a number: 500 transaction_aborted', async () => {
    const first = await post('control', 'number');
    const retried = await post('control', 'number');
    expect({ first, retried }).toEqual({
      first: { status: 500, code: 'transaction_aborted' },
      retried: { status: 500, code: 'transaction_aborted' },
    });
  }, 60_000);

  it('the pid as a BigInt: 500 transaction_aborted too', async () => {
    const first = await post('bigint', 'bigint');
    const retried = await post('bigint', 'bigint');
    expect({ first, retried }).toEqual({
      first: { status: 500, code: 'transaction_aborted' },
      retried: { status: 500, code: 'transaction_aborted' },
    });
  }, 60_000);
});
