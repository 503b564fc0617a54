/**
 * Adversary 80 (TypeORM): a TypeORM handler that bounds its own slow statement by cancelling
 * it (`pg_cancel_backend(<its backend>)` sent from `IdempotentTransaction.outside()` through
 * the DataSource, the only second connection its code can reach) is answered 503
 * `database_transient` with `Retry-After: 1`, and every retry meets the same 503; the same code
 * on the pool seam (Drizzle, Kysely, `pool.query`) answers the documented 500
 * `transaction_aborted`.
 *
 *   await this.dataSource.query('INSERT INTO orders (sku) VALUES ($1)', [sku]);
 *   const [{ pid }] = await this.dataSource.query('SELECT pg_backend_pid() AS pid');
 *   const watchdog = setTimeout(() => IdempotentTransaction.outside(() =>
 *     this.dataSource.query('SELECT pg_cancel_backend($1)', [pid])), 300);
 *   try { await this.dataSource.query('SELECT pg_sleep(1.5)'); } catch { } finally { clearTimeout(watchdog); }
 *
 * Why: the app's own cancel is told from anyone else's only by `watchCancels`
 * (lib/data-layers/cancel-watch.ts), which `joinTransactionsOfPool` installs on the pool the
 * module is given (lib/data-layers/data-layer.ts, pool-join.ts). On TypeORM the request's
 * connection comes from the DataSource's driver pool, which nothing watches: the
 * `pg_cancel_backend` is never noted (`RequestTransaction.cancelAsked` is never called), its
 * 57014 "canceling statement due to user request" is never marked (`markAskedByApp`), and
 * lib/transaction/failure.ts answers it as a passing failure (`databaseFailure`: 503).
 *
 * Docs: docs/guides/data-layers.md, "Errors" (which names TypeORM's `QueryFailedError` among
 * the wrappers it reads): "A statement cancelled, or the request's connection ended, by the
 * request's own code (`pg_cancel_backend` or `pg_terminate_backend` of the request's backend,
 * sent through the pool's clients in the request ...) is no passing failure: it ends the
 * request's transaction, which answers 500 `transaction_aborted` (nothing stored; the retry
 * meets the same cancel)", "sent in the request or in its `outside()`". The DataSource's pool
 * is the pool the TypeORM request's connection is a client of.
 *
 * Severity: medium (a false "retry later, Retry-After: 1" answered for ever to a request whose
 * every retry fails the same way, each retry running its effects again up to the cancel;
 * nothing committed twice).
 *
 * Fails now: both tries answer 503 `database_transient` with `Retry-After: 1`. Control: the same
 * handler whose watchdog does not fire answers 201 and replays it.
 *
 * Suggested fix: install `watchCancels` on the TypeORM DataSource's driver pool (its
 * `driver.master`, and its replication pools) when the module joins TypeORM, as
 * `joinTransactionsOfPool` does for the pool seam; `LazyTransaction` already is a
 * `RequestTransaction`, whose `cancelAsked` checks the pid.
 *
 * Fixed: lib/data-layers/data-layer.ts `typeOrmDataLayer` installs `watchCancels` on the
 * DataSource's driver pools (`driver.master` and each of `driver.slaves`) each time it reads
 * the pool (before the request's connection is taken; a DataSource initialized again has new
 * pools); docs/guides/data-layers.md "Errors" says so.
 */
import { Body, Controller, HttpCode, Post } from '@nestjs/common';
import request from 'supertest';
import { DataSource } from 'typeorm';
import { Idempotent, IdempotentTransaction } from '../../../lib/index.js';
import { startTypeormApp, type TypeormApp } from '../../support/typeorm-app.js';

type Watchdog = 'cancels' | 'idle';

@Controller('orders')
class OrdersController {
  constructor(private readonly dataSource: DataSource) {}

  @Post()
  @HttpCode(201)
  @Idempotent()
  async place(@Body() body: { sku: string; watchdog: Watchdog }) {
    await this.dataSource.query('INSERT INTO orders (sku) VALUES ($1)', [body.sku]);
    const [{ pid }] = (await this.dataSource.query('SELECT pg_backend_pid() AS pid')) as {
      pid: number;
    }[];
    const watchdog = setTimeout(() => {
      if (body.watchdog === 'idle') return;
      IdempotentTransaction.outside(() =>
        this.dataSource.query('SELECT pg_cancel_backend($1)', [pid]),
      ).catch(() => undefined);
    }, 300);
    try {
      await this.dataSource.query(
        body.watchdog === 'idle' ? 'SELECT pg_sleep(0.05)' : 'SELECT pg_sleep(1.5)',
      );
    } catch {
      // bounded: answer without it
    } finally {
      clearTimeout(watchdog);
    }
    return { sku: body.sku };
  }
}

describe('adversary 80 typeorm: the request cancels its own statement', () => {
  let fixture: TypeormApp;

  beforeAll(async () => {
    fixture = await startTypeormApp('adv80_typeorm_own_cancel', {
      controllers: [OrdersController],
      setup: async (owner) => {
        await owner.query(`CREATE TABLE orders (id bigserial PRIMARY KEY, sku text NOT NULL)`);
      },
    });
  }, 60_000);

  afterAll(async () => {
    await fixture?.close();
  });

  async function post(sku: string, watchdog: Watchdog) {
    const answer = await request(fixture.app.getHttpServer())
      .post('/orders')
      .set('Idempotency-Key', `key-${sku}`)
      .send({ sku, watchdog })
      .timeout(30_000);
    const body = answer.body as { code?: string; sku?: string };
    return { status: answer.status, answer: body.code ?? body.sku };
  }

  it('control: the same handler whose watchdog does not fire answers 201 and replays it', async () => {
    const first = await post('idle', 'idle');
    const retried = await post('idle', 'idle');
    expect({ first, retried }).toEqual({
      first: { status: 201, answer: 'idle' },
      retried: { status: 201, answer: 'idle' },
    });
  }, 60_000);

  it('its own cancel, sent from outside() through the DataSource, is 500 transaction_aborted', async () => {
    const first = await post('cancels', 'cancels');
    const retried = await post('cancels', 'cancels');
    expect({ first, retried }).toEqual({
      first: { status: 500, answer: 'transaction_aborted' },
      retried: { status: 500, answer: 'transaction_aborted' },
    });
  }, 60_000);
});
