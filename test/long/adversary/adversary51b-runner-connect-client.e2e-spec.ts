import { Body, Controller, Post } from '@nestjs/common';
import { InjectDataSource } from '@nestjs/typeorm';
import { type PoolClient } from 'pg';
import { type DataSource } from 'typeorm';
import request from 'supertest';
import { Idempotent } from '../../../lib/index.js';
import { startTypeormApp, type TypeormApp } from '../../support/typeorm-app.js';

/**
 * Adversary, round 51b: the pg client TypeORM's `queryRunner.connect()` answers, used as the
 * node-postgres client it is.
 *
 * The app (TypeORM, READ COMMITTED): TypeORM's manual recipe, `const runner =
 * dataSource.createQueryRunner(); const client = await runner.connect()`, and the client it
 * answers (TypeORM: "Returns obtained database connection", node-postgres' PoolClient) used
 * for what only a pg client has:
 * - `POST /notice`: `client.on('notice', ...)` to collect what a procedure RAISEs (the order
 *   is inserted through the runner by `place_order()`, which RAISEs a NOTICE), then
 *   `client.removeListener(...)`;
 * - `POST /notify`: `NOTIFY orders_channel, ${client.escapeLiteral(payload)}` (NOTIFY takes
 *   no parameters: node-postgres' own escaping is the recipe), after an insert.
 * Both `@Idempotent()`.
 *
 * What happens: 500 (the handler's own error, answered as a handler's error is), no order:
 * `TypeError: client.on is not a function` / `client.escapeLiteral is not a function`. Since e190a90, a
 * `connect()` before the handler's first statement answers a stand-in with only `query` and
 * `release` (lazy-transaction.ts `unopened()`, ~593-611), not a client: `on`,
 * `removeListener`, `escapeLiteral`, `escapeIdentifier`, `processID` are all missing. The same
 * `connect()` once the transaction has begun answers the guarded real client
 * (lazy-transaction.ts `open()`), where both recipes work (control below).
 *
 * Expected: as without the library: 201, the order once, the notices collected / the NOTIFY
 * sent; replayed identically.
 *
 * Controls: `POST /notice-after-write` (the same, with a write through the runner before
 * `connect()`'s client is used: `connect()` then answers the real client): 201; `POST
 * /notice-plain` (no `@Idempotent()`): 201.
 *
 * Severity: medium (an error stored as the final answer where an answer is due; nothing twice).
 */
class OrderBody {
  sku!: string;
}

@Controller()
class OrdersController {
  constructor(@InjectDataSource() private readonly dataSource: DataSource) {}

  private async withNotices(body: OrderBody, writeFirst: boolean) {
    const runner = this.dataSource.createQueryRunner();
    if (writeFirst) await runner.query('INSERT INTO audit (note) VALUES ($1)', [body.sku]);
    const client = (await runner.connect()) as PoolClient;
    const notices: string[] = [];
    const onNotice = (notice: { message?: string }) => notices.push(String(notice.message));
    client.on('notice', onNotice);
    try {
      const rows = (await runner.query('SELECT place_order($1) AS id', [body.sku])) as {
        id: number;
      }[];
      return { id: rows[0].id, notices };
    } finally {
      client.removeListener('notice', onNotice);
      await runner.release();
    }
  }

  private async withNotify(body: OrderBody) {
    const runner = this.dataSource.createQueryRunner();
    const client = (await runner.connect()) as PoolClient;
    try {
      const rows = (await runner.query('INSERT INTO orders (sku) VALUES ($1) RETURNING id', [
        body.sku,
      ])) as { id: number }[];
      await runner.query(
        `NOTIFY orders_channel, ${client.escapeLiteral(JSON.stringify({ sku: body.sku }))}`,
      );
      return { id: rows[0].id };
    } finally {
      await runner.release();
    }
  }

  @Post('notice')
  @Idempotent()
  notice(@Body() body: OrderBody) {
    return this.withNotices(body, false);
  }

  @Post('notify')
  @Idempotent()
  notify(@Body() body: OrderBody) {
    return this.withNotify(body);
  }

  @Post('notice-after-write')
  @Idempotent()
  noticeAfterWrite(@Body() body: OrderBody) {
    return this.withNotices(body, true);
  }

  @Post('notice-plain')
  noticePlain(@Body() body: OrderBody) {
    return this.withNotices(body, false);
  }
}

describe('adversary 51b: the client a query runner connect() answers', () => {
  let fixture: TypeormApp;
  beforeAll(async () => {
    fixture = await startTypeormApp('adv51b_connect_client', {
      controllers: [OrdersController],
      max: 6,
      setup: async (admin) => {
        await admin.query('CREATE TABLE orders (id serial PRIMARY KEY, sku text NOT NULL)');
        await admin.query('CREATE TABLE audit (id serial PRIMARY KEY, note text NOT NULL)');
        await admin.query(`
          CREATE FUNCTION place_order(p_sku text) RETURNS int LANGUAGE plpgsql AS $$
          DECLARE new_id int;
          BEGIN
            INSERT INTO orders (sku) VALUES (p_sku) RETURNING id INTO new_id;
            RAISE NOTICE 'order % placed', p_sku;
            RETURN new_id;
          END $$`);
      },
    });
  }, 60_000);
  afterAll(async () => fixture?.close());

  const post = (path: string, key: string | undefined, sku: string) => {
    const r = request(fixture.app.getHttpServer()).post(path);
    if (key) r.set('Idempotency-Key', key);
    return r.send({ sku });
  };
  const orders = async (sku: string) =>
    Number(
      (await fixture.admin.query('SELECT count(*) AS n FROM orders WHERE sku = $1', [sku])).rows[0]
        .n,
    );

  const answersOnce = async (path: string, sku: string, body: object) => {
    const first = await post(path, sku, sku);
    expect({ status: first.status, body: first.body as unknown }).toEqual({ status: 201, body });
    const again = await post(path, sku, sku);
    expect(again.headers['idempotent-replayed']).toBe('true');
    expect(again.body).toEqual(first.body);
    expect(await orders(sku)).toBe(1);
  };

  it("client.on('notice') on connect()'s client: 201, the notice collected, the order once", async () => {
    await answersOnce('/notice', 'n-1', { id: expect.any(Number), notices: ['order n-1 placed'] });
  });

  it("client.escapeLiteral() on connect()'s client for a NOTIFY: 201, the order once", async () => {
    await answersOnce('/notify', 'y-1', { id: expect.any(Number) });
  });

  it('control: the same after a write (connect() answers the real client): 201', async () => {
    await answersOnce('/notice-after-write', 'w-1', {
      id: expect.any(Number),
      notices: ['order w-1 placed'],
    });
  });

  it('control: without @Idempotent(): 201, the notice collected', async () => {
    const res = await post('/notice-plain', undefined, 'p-1');
    expect({ status: res.status, body: res.body as unknown }).toEqual({
      status: 201,
      body: { id: expect.any(Number), notices: ['order p-1 placed'] },
    });
  });
});
