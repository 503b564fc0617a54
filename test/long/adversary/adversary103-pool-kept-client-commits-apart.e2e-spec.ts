/**
 * Fixed (session of 2026-12-06, seventh): a view kept from another request (`placeOfClient`,
 * lib/data-layers/client-place.ts) joins the request it is used in: its statement runs on a
 * stand-in view of that request's connection (`JoinedClient.placed`,
 * lib/data-layers/pool-transaction.ts), whether the request it was taken in committed or rolled
 * back; so the later request's write is kept once, across its 503 and retry.
 *
 * Adversary 103 (pool): a node-postgres client taken with `pool.connect()` inside one
 * `@Idempotent()` request and kept by the app (`this.client ??= await pool.connect()`, a lazily
 * made "dedicated connection") is, once that request has committed, "a connection of its own"
 * (data-layers.md, for work left running past the end). Used by a later request, its writes
 * commit at once, apart from that request's transaction: a later request that fails for a
 * passing reason (503 `database_transient`) and is retried keeps the write twice. No refusal,
 * no warning. The same client kept from a request that rolled back is refused in every later
 * request (500): the two ends disagree, and the committed one loses exactly-once.
 *
 * User code:
 *   @Post(':sku') @Idempotent()
 *   async place(@Param('sku') sku) {
 *     this.client ??= await pool.connect();      // the module's pool, kept for next time
 *     await this.client.query('INSERT INTO orders (sku) VALUES ($1)', [sku]);
 *     ... // this try fails for a passing reason (its own statement timeout) -> 503
 *     return { sku };
 *   }
 *
 * Code path: lib/data-layers/after-request-commit.ts (a view used past its request's commit,
 * with no transaction of its own open, becomes a connection of its own) and
 * lib/data-layers/pool-transaction.ts / runner-view.ts (a view belongs to the request that
 * connected it; statements sent on it from another request's async context are not judged as
 * that request's). TypeORM's analog (a repository or runner kept from one request) joins the
 * request it is used in later, or is refused (`runner_connected_outside_request`).
 *
 * Docs quote: data-layers.md: "Joined: every query Kysely sends through the pool the module
 * was given, inside the request's async context ..., and any other `pool.query()` or
 * `pool.connect()` on that pool"; transactions.md: "A repository, manager or runner kept from
 * one request ... joins the request it is used in later"; the promise: a request's statements
 * run in its transaction or are refused with a clear message at once. The only writes said to
 * commit apart are another pool's (with a warning), work queued to another context, and
 * work the handler left running past its own request's end.
 *
 * Severity: high (an effect committed twice: once per try of the later request; kept with
 * nothing stored when that request fails for good).
 *
 * Fails now: request A (sku ka-0) answers 201 and commits; request B (ka-1) on the kept client
 * answers 503 `database_transient` then 201 on its retry, and the orders table holds ka-1
 * twice. The control (a client taken in each request) keeps it once.
 *
 * Suggested fix: a client kept from a request that has ended, used from another request's
 * async context, either joins that request (as TypeORM's kept runner does: a view of the new
 * request's connection) or is refused at once with a clear error naming the fix (take the
 * client with `pool.connect()` in each request); and say it in data-layers.md.
 */
import { Body, Controller, HttpCode, Module, Post } from '@nestjs/common';
import { type Pool, type PoolClient } from 'pg';
import request from 'supertest';
import { IdempotencyModule, Idempotent } from '../../../lib/index.js';
import { type PoolApp, startPoolApp } from '../../support/pool-app.js';

let pool: Pool;
let kept: PoolClient | undefined;
const failing = new Set<string>();

/** The first try of a sku in `failing` fails for a passing reason: its own statement timeout. */
async function failFirstTry(sku: string) {
  if (failing.delete(sku)) {
    await pool.query(`SET LOCAL statement_timeout = '50ms'`);
    await pool.query('SELECT pg_sleep(0.5)');
  }
}

@Controller('orders')
class OrdersController {
  /** A client taken in each request. */
  @Post('each')
  @HttpCode(201)
  @Idempotent()
  async each(@Body() { sku }: { sku: string }) {
    const client = await pool.connect();
    try {
      await client.query(`INSERT INTO orders (sku) VALUES ($1)`, [sku]);
    } finally {
      client.release();
    }
    await failFirstTry(sku);
    return { sku };
  }

  /** A client taken in the first request and kept. */
  @Post('kept')
  @HttpCode(201)
  @Idempotent()
  async kept(@Body() { sku }: { sku: string }) {
    kept ??= await pool.connect();
    await kept.query(`INSERT INTO orders (sku) VALUES ($1)`, [sku]);
    await failFirstTry(sku);
    return { sku };
  }
}

describe('adversary 103 pool: a client kept from an ended request commits apart in the next', () => {
  let fixture: PoolApp;

  beforeAll(async () => {
    @Module({
      imports: [IdempotencyModule.forRootAsync({ useFactory: () => ({ globalKeys: true, pool }) })],
      controllers: [OrdersController],
    })
    class OrdersModule {}
    fixture = await startPoolApp('adv103_pool_kept_client', {
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
    kept?.release();
    await fixture?.close();
  });

  async function post(route: 'each' | 'kept', sku: string) {
    const answer = await request(fixture.app.getHttpServer())
      .post(`/orders/${route}`)
      .set('Idempotency-Key', `key-${route}-${sku}`)
      .send({ sku })
      .timeout(20_000);
    const body = answer.body as { code?: string; sku?: string };
    return { status: answer.status, answer: body.code ?? body.sku };
  }

  async function count(sku: string) {
    const { rows } = await fixture.admin.query<{ n: number }>(
      `SELECT count(*)::int AS n FROM orders WHERE sku = $1`,
      [sku],
    );
    return rows[0].n;
  }

  it('control: a client taken in each request joins it; a 503 and its retry keep the write once', async () => {
    const before = await post('each', 'each-0');
    failing.add('each-1');
    const first = await post('each', 'each-1');
    const retried = await post('each', 'each-1');
    expect({ before, first, retried, kept: await count('each-1') }).toEqual({
      before: { status: 201, answer: 'each-0' },
      first: { status: 503, answer: 'database_transient' },
      retried: { status: 201, answer: 'each-1' },
      kept: 1,
    });
  }, 60_000);

  it('a client kept from an ended request joins the next request or is refused, never written twice', async () => {
    const before = await post('kept', 'ka-0');
    failing.add('ka-1');
    const first = await post('kept', 'ka-1');
    const retried = await post('kept', 'ka-1');
    const outcome = { before, first, retried, kept: await count('ka-1') };
    // Refused at once (a 500, nothing kept) would hold the promise too.
    const refused = first.status === 500 && outcome.kept === 0;
    if (!refused) {
      expect(outcome).toEqual({
        before: { status: 201, answer: 'ka-0' },
        first: { status: 503, answer: 'database_transient' },
        retried: { status: 201, answer: 'ka-1' },
        kept: 1,
      });
    }
  }, 60_000);
});
