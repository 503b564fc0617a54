/**
 * Fixed (session of 2026-12-06, seventh): a client of the joined pool handed out as itself is
 * noted with the scope it was taken in (lib/data-layers/client-taken.ts); a statement on one
 * taken outside every request, sent from an open request or phase, is refused at once
 * (`placeOfClient`, lib/data-layers/client-place.ts: `ClientTakenElsewhereError`, 500
 * `runner_connected_outside_request`, rolled back, nothing stored, key given back), as
 * TypeORM's runner connected before the request is. Outside every request it runs as always.
 *
 * Adversary 103 (pool): a node-postgres client the app took from the module's own pool before
 * the request (`this.client = await pool.connect()` in `onModuleInit`, a "dedicated
 * connection" kept for the app's life) and then uses inside an `@Idempotent()` handler is
 * neither joined nor refused: its writes commit at once, on their own connection, apart from
 * the request's transaction. A request that fails for a passing reason (503
 * `database_transient`) rolls back everything else, the retry runs again, and the held
 * client's write is kept twice. No refusal, no warning.
 *
 * User code:
 *   @Injectable() class Audit implements OnModuleInit {
 *     client!: PoolClient;
 *     async onModuleInit() { this.client = await pool.connect(); }   // the module's pool
 *   }
 *   @Post() @Idempotent()
 *   async place(@Body() { sku }) {
 *     await pool.query(`INSERT INTO orders (sku, via) VALUES ($1, 'joined')`, [sku]);
 *     await audit.client.query(`INSERT INTO orders (sku, via) VALUES ($1, 'held')`, [sku]);
 *     ... // first try: a statement timeout (SET LOCAL statement_timeout; a slow read) -> 503
 *     return { sku };
 *   }
 *
 * Code path: lib/data-layers/pool-join.ts (the pool's `connect()`/`query()` are what join
 * the request: a client handed out before it is a plain pg Client) and
 * lib/data-layers/pool-transaction.ts (`statement`: only statements sent through the pool or a
 * view it handed out in the request's context are seen). Nothing watches a client the pool
 * handed out before the request for statements sent from inside one (the cancel watch,
 * lib/data-layers/cancel-watch.ts, does watch such clients, for `pg_cancel_backend` only).
 *
 * Docs quote: docs/guides/kysely.md / data-layers.md: "Joined: every query ... sent through
 * the pool the module was given, inside the request's async context ..., and any other
 * `pool.query()` or `pool.connect()` on that pool." The only writes said to commit apart are
 * "a client on another pool" (with a warning, once per pool), work queued to another context
 * and `atomic: false` routes. On TypeORM the same mistake (a runner connected before the
 * request) is refused: `runner_connected_outside_request` (docs/reference/problems.md), "its
 * writes would commit apart from the answer". The promise: a request's statements run in its
 * transaction or are refused with a clear message at once.
 *
 * Severity: high (an effect committed twice: once per try, however many 503s precede the 201;
 * and an effect kept with nothing stored when the request fails for good).
 *
 * Fails now: first try 503 `database_transient` (rolled back: the joined row gone), retry 201;
 * the orders table holds the joined row once and the held client's row twice; no error or
 * warning is raised for the held client's statement.
 *
 * Suggested fix: watch every client the pool hands out (as cancel-watch.ts already does) and
 * refuse a statement sent on a client connected outside the request from within a request's
 * async context (a `ClientConnectedOutsideRequestError`, 500, rolled back, as TypeORM's
 * runner refusal), or at least log a warning once per client naming the fix (take the client
 * with `pool.connect()` in the handler); and say it in data-layers.md "What is not joined".
 */
import { Body, Controller, HttpCode, Module, Post } from '@nestjs/common';
import { type Pool, type PoolClient } from 'pg';
import request from 'supertest';
import { IdempotencyModule, Idempotent } from '../../../lib/index.js';
import { type PoolApp, startPoolApp } from '../../support/pool-app.js';

let pool: Pool;
let held: PoolClient;
const tries = new Map<string, number>();

/** The first try of each sku fails for a passing reason: its own statement timeout. */
async function failFirstTry(sku: string) {
  const n = (tries.get(sku) ?? 0) + 1;
  tries.set(sku, n);
  if (n === 1) {
    await pool.query(`SET LOCAL statement_timeout = '50ms'`);
    await pool.query('SELECT pg_sleep(0.5)');
  }
}

@Controller('orders')
class OrdersController {
  /** The client taken with `pool.connect()` in the handler: joined. */
  @Post('taken-here')
  @HttpCode(201)
  @Idempotent()
  async takenHere(@Body() { sku }: { sku: string }) {
    await pool.query(`INSERT INTO orders (sku, via) VALUES ($1, 'joined')`, [sku]);
    const client = await pool.connect();
    try {
      await client.query(`INSERT INTO orders (sku, via) VALUES ($1, 'held')`, [sku]);
    } finally {
      client.release();
    }
    await failFirstTry(sku);
    return { sku };
  }

  /** The client the app took from the same pool at start-up. */
  @Post('held')
  @HttpCode(201)
  @Idempotent()
  async held(@Body() { sku }: { sku: string }) {
    await pool.query(`INSERT INTO orders (sku, via) VALUES ($1, 'joined')`, [sku]);
    await held.query(`INSERT INTO orders (sku, via) VALUES ($1, 'held')`, [sku]);
    await failFirstTry(sku);
    return { sku };
  }
}

describe('adversary 103 pool: a client taken from the pool before the request commits apart', () => {
  let fixture: PoolApp;

  beforeAll(async () => {
    @Module({
      imports: [IdempotencyModule.forRootAsync({ useFactory: () => ({ globalKeys: true, pool }) })],
      controllers: [OrdersController],
    })
    class OrdersModule {}
    fixture = await startPoolApp('adv103_pool_held_client', {
      module: OrdersModule,
      max: 4,
      usePool: (started) => {
        pool = started;
      },
      setup: async (owner) => {
        await owner.query(
          `CREATE TABLE orders (id bigserial PRIMARY KEY, sku text NOT NULL, via text NOT NULL)`,
        );
      },
    });
    // The app's long-lived client, taken from the module's pool before any request.
    held = await fixture.pool.connect();
  }, 60_000);

  afterAll(async () => {
    held?.release();
    await fixture?.close();
  });

  async function post(route: 'taken-here' | 'held', sku: string) {
    const answer = await request(fixture.app.getHttpServer())
      .post(`/orders/${route}`)
      .set('Idempotency-Key', `key-${route}-${sku}`)
      .send({ sku })
      .timeout(20_000);
    const body = answer.body as { code?: string; sku?: string };
    return { status: answer.status, answer: body.code ?? body.sku };
  }

  async function kept(sku: string) {
    const { rows } = await fixture.admin.query<{ via: string; n: number }>(
      `SELECT via, count(*)::int AS n FROM orders WHERE sku = $1 GROUP BY via ORDER BY via`,
      [sku],
    );
    return Object.fromEntries(rows.map((row) => [row.via, row.n]));
  }

  it('control: a client taken in the handler joins; a 503 and its retry keep each write once', async () => {
    const first = await post('taken-here', 'here-1');
    const retried = await post('taken-here', 'here-1');
    const replayed = await post('taken-here', 'here-1');
    expect({ first, retried, replayed, kept: await kept('here-1') }).toEqual({
      first: { status: 503, answer: 'database_transient' },
      retried: { status: 201, answer: 'here-1' },
      replayed: { status: 201, answer: 'here-1' },
      kept: { held: 1, joined: 1 },
    });
  }, 60_000);

  it('a client taken before the request is joined or refused, never written twice', async () => {
    const first = await post('held', 'held-1');
    const retried = await post('held', 'held-1');
    const outcome = { first, retried, kept: await kept('held-1') };
    // Joined: each write once. Refused: the first try fails with a clear error, nothing kept.
    const joined = {
      first: { status: 503, answer: 'database_transient' },
      retried: { status: 201, answer: 'held-1' },
      kept: { held: 1, joined: 1 },
    };
    const refused = outcome.first.status === 500 && Object.keys(outcome.kept).length === 0;
    if (!refused) expect(outcome).toEqual(joined);
  }, 60_000);
});
