import { Body, Controller, Post } from '@nestjs/common';
import { InjectDataSource } from '@nestjs/typeorm';
import { type PoolClient } from 'pg';
import { type DataSource } from 'typeorm';
import request from 'supertest';
import { Idempotent, PhaseRunner } from '../../../lib/index.js';
import { startTypeormApp, type TypeormApp } from '../../support/typeorm-app.js';

/**
 * Adversary, round 51b: a plain read through the pg client a query runner's `connect()`
 * answers, before the first phase.
 *
 * The app (TypeORM, READ COMMITTED): `POST /client-def` (`@Idempotent()`) and `POST
 * /client-one` (`@Idempotent({ oneCommit: true })`) read a count through the client TypeORM's
 * `runner.connect()` answers (`const client = await runner.connect(); await
 * client.query('SELECT count(*) AS n FROM orders')`, then `runner.release()`), then run a
 * phase that inserts an order, then `finish()`.
 *
 * What happens: 500 `PhaseOrderError` ("started after the request's transaction began (a write
 * outside a phase begins it, and so does a read on a route above READ COMMITTED...)"), the
 * handler's error, answered as a handler's error is; no order. e190a90 made `connect()` answer a client
 * that "opens the connection at its first statement" so that "a plain read after it still
 * runs apart" (lazy-transaction.ts `unopened()` doc): through `runner.query()` it does
 * (adversary50b-runner-read-before-phase passes), but the client's own `query()`
 * (lazy-transaction.ts ~596) goes straight to `open()` and `send()`, skipping the plain-read
 * test of `queryFrom`: the read begins the request's transaction (`codeTouched`), and the
 * phase after it is refused. On the pool seam, a plain read through `pool.connect()`'s client
 * runs apart (pool-transaction.ts `statement()`).
 *
 * Expected: as through `runner.query()` (control): 201, the order once, replayed.
 *
 * Control: `POST /runner-def`, the same read through `runner.query()`: 201.
 *
 * Severity: medium (an error stored as the final answer where an answer is due, with a message
 * not true of the handler; nothing twice).
 */
class OrderBody {
  sku!: string;
}

@Controller()
class OrdersController {
  constructor(
    private readonly phases: PhaseRunner,
    @InjectDataSource() private readonly dataSource: DataSource,
  ) {}

  private async count(viaClient: boolean): Promise<number> {
    const runner = this.dataSource.createQueryRunner();
    const client = (await runner.connect()) as PoolClient;
    try {
      const rows = viaClient
        ? (await client.query<{ n: string }>('SELECT count(*) AS n FROM orders')).rows
        : ((await runner.query('SELECT count(*) AS n FROM orders')) as { n: string }[]);
      return Number(rows[0].n);
    } finally {
      await runner.release();
    }
  }

  private async place(body: OrderBody, before: number) {
    const order = await this.phases.run('placed', async (manager) => {
      const rows = (await manager.query('INSERT INTO orders (sku) VALUES ($1) RETURNING id', [
        body.sku,
      ])) as { id: number }[];
      return { id: rows[0].id };
    });
    return this.phases.finish(async () => ({ ...order, before, sku: body.sku }));
  }

  @Post('client-def')
  @Idempotent()
  async clientDef(@Body() body: OrderBody) {
    return this.place(body, await this.count(true));
  }

  @Post('client-one')
  @Idempotent({ oneCommit: true })
  async clientOne(@Body() body: OrderBody) {
    return this.place(body, await this.count(true));
  }

  @Post('runner-def')
  @Idempotent()
  async runnerDef(@Body() body: OrderBody) {
    return this.place(body, await this.count(false));
  }
}

describe("adversary 51b: a plain read through connect()'s client before the first phase", () => {
  let fixture: TypeormApp;
  beforeAll(async () => {
    fixture = await startTypeormApp('adv51b_client_read', {
      controllers: [OrdersController],
      max: 6,
      setup: async (admin) => {
        await admin.query('CREATE TABLE orders (id serial PRIMARY KEY, sku text NOT NULL)');
      },
    });
  }, 60_000);
  afterAll(async () => fixture?.close());

  const post = (path: string, key: string) =>
    request(fixture.app.getHttpServer()).post(path).set('Idempotency-Key', key).send({ sku: key });
  const orders = async (sku: string) =>
    Number(
      (await fixture.admin.query('SELECT count(*) AS n FROM orders WHERE sku = $1', [sku])).rows[0]
        .n,
    );

  const placesOnce = async (path: string) => {
    const key = `read${path.replace('/', '-')}`;
    const first = await post(path, key);
    expect({ status: first.status, body: first.body as unknown }).toEqual({
      status: 201,
      body: { id: expect.any(Number), before: expect.any(Number), sku: key },
    });
    const again = await post(path, key);
    expect(again.headers['idempotent-replayed']).toBe('true');
    expect(again.body).toEqual(first.body);
    expect(await orders(key)).toBe(1);
  };

  it("default: a plain read through connect()'s client, then a phase: 201, once (is 500 PhaseOrderError)", async () => {
    await placesOnce('/client-def');
  });

  it("oneCommit: a plain read through connect()'s client, then a phase: 201, once (is 500 PhaseOrderError)", async () => {
    await placesOnce('/client-one');
  });

  it('control: the same read through runner.query(): 201, once', async () => {
    await placesOnce('/runner-def');
  });
});
