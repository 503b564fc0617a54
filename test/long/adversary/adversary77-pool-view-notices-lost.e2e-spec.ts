/**
 * Adversary 77: a handler that reports the warnings PostgreSQL sends while it works (node-
 * postgres' documented `client.on('notice', …)`: a function's `RAISE NOTICE`, or `CREATE … IF
 * NOT EXISTS, skipping`). Keyed, no notice is ever emitted on the client the handler holds: the
 * answer is stored without its warnings and replayed so to every retry. Without the library:
 * the warning is in the answer.
 *
 *   const client = await pool.connect();
 *   const warnings: string[] = [];
 *   client.on('notice', (notice) => warnings.push(notice.message));
 *   await client.query('SELECT reserve_stock($1, $2)', [item, qty]);   // RAISE NOTICE 'stock low…'
 *   client.release();
 *   return { reserved: true, warnings };
 *
 * Why: a view of the request's connection (`JoinedClient`, lib/data-layers/pool-transaction.ts)
 * sends its statements on the request's one pooled connection, whose 'notice' events are never
 * forwarded to the view: `forwardEvents` (lib/data-layers/view-listener.ts) is wired only for a
 * LISTEN's connection of its own and for a connection apart after the request ended. Read
 * apart (before the first write) or on the request's connection, the notice is lost.
 *
 * Docs (docs/guides/data-layers.md): "`pool.connect()` gives a view of the request's
 * connection", and of the LISTEN connection: "whose notifications (and notices) are emitted on
 * the client" - the client's events are kept where the library moved a statement; node-postgres
 * (Client events): "notice: Used to log out notice messages from the PostgreSQL server". The
 * promise: a retry gets the stored answer, and that answer is the handler's as without the
 * library.
 *
 * Control: without `@Idempotent()`: the warning in the answer.
 *
 * Severity: medium (an answer stored without what the handler saw without the library, replayed
 * for the retention window; code that branches on a notice takes another path).
 *
 * Fails now: keyed: `warnings: []`.
 *
 * Suggested fix: while a view has a statement on the request's connection (or a read apart),
 * forward that connection's 'notice' events to the view (`forwardEvents`), as is done for the
 * LISTEN connection.
 *
 * Fixed: `NoticeRouter` (lib/data-layers/notice-router.ts) listens on the request's connection
 * while a statement of the app's is on it and tells each notice to the view whose statement is
 * the first handed over and not answered (the connection runs them in that order); a plain read
 * run apart tells its connection's notices to its view (`noticesTo`). Wired in
 * `PoolTransaction.statement` / `readApart` (pool-transaction.ts). Unit:
 * lib/data-layers/notice-router.spec.ts.
 */
import { Body, Controller, Inject, Module, Post } from '@nestjs/common';
import { type Pool } from 'pg';
import request from 'supertest';
import { IdempotencyModule, Idempotent } from '../../../lib/index.js';
import { type PoolApp, startPoolApp } from '../../support/pool-app.js';

const POOL = Symbol('POOL');
let pool: Pool;

async function work(pool: Pool, { item }: { item: string }) {
  const client = await pool.connect();
  const warnings: string[] = [];
  client.on('notice', (notice: { message?: string }) => warnings.push(String(notice.message)));
  try {
    await client.query('SELECT adv77notice_reserve($1, 3)', [item]);
  } finally {
    client.release();
  }
  return { item, reserved: true, warnings };
}

@Controller()
class StockController {
  constructor(@Inject(POOL) private readonly pool: Pool) {}

  @Post('keyed')
  @Idempotent()
  keyed(@Body() body: { item: string }) {
    return work(this.pool, body);
  }

  @Post('plain')
  plain(@Body() body: { item: string }) {
    return work(this.pool, body);
  }
}

@Module({
  imports: [IdempotencyModule.forRootAsync({ useFactory: () => ({ globalKeys: true, pool }) })],
  controllers: [StockController],
  providers: [{ provide: POOL, useFactory: () => pool }],
})
class StockModule {}

describe('adversary 77: notices of a statement on a client of the pool', () => {
  let fixture: PoolApp;

  beforeAll(async () => {
    fixture = await startPoolApp('adv77_notices', {
      module: StockModule,
      max: 4,
      usePool: (started) => {
        pool = started;
      },
      setup: async (admin) => {
        await admin.query(`
          CREATE TABLE adv77notice_stock (item text PRIMARY KEY, qty int NOT NULL);
          INSERT INTO adv77notice_stock VALUES ('plain-w', 5), ('keyed-w', 5);
          CREATE FUNCTION adv77notice_reserve(p_item text, p_qty int) RETURNS void
          LANGUAGE plpgsql AS $$
          DECLARE left_qty int;
          BEGIN
            UPDATE adv77notice_stock SET qty = qty - p_qty WHERE item = p_item
              RETURNING qty INTO left_qty;
            IF left_qty < 3 THEN
              RAISE NOTICE 'stock low for %: % left', p_item, left_qty;
            END IF;
          END $$;`);
      },
    });
  }, 60_000);

  afterAll(async () => {
    await fixture?.close();
  });

  const post = (path: string, key: string | undefined, item: string) => {
    const call = request(fixture.app.getHttpServer()).post(path);
    if (key) call.set('Idempotency-Key', key);
    return call.send({ item });
  };

  const qty = async (item: string) =>
    (
      await fixture.admin.query<{ qty: number }>(
        'SELECT qty FROM adv77notice_stock WHERE item = $1',
        [item],
      )
    ).rows[0].qty;

  it('control: without @Idempotent(): the warning is in the answer', async () => {
    const answer = await post('/plain', undefined, 'plain-w');
    expect({
      status: answer.status,
      body: answer.body as unknown,
      qty: await qty('plain-w'),
    }).toEqual({
      status: 201,
      body: { item: 'plain-w', reserved: true, warnings: ['stock low for plain-w: 2 left'] },
      qty: 2,
    });
  }, 30_000);

  it('keyed: the warning is in the answer, and in its replay', async () => {
    const first = await post('/keyed', 'adv77-notice-keyed', 'keyed-w');
    const replay = await post('/keyed', 'adv77-notice-keyed', 'keyed-w');
    const expected = {
      item: 'keyed-w',
      reserved: true,
      warnings: ['stock low for keyed-w: 2 left'],
    };
    expect({
      status: first.status,
      body: first.body as unknown,
      replay: replay.body as unknown,
      qty: await qty('keyed-w'),
    }).toEqual({ status: 201, body: expected, replay: expected, qty: 2 });
  }, 30_000);
});
