import { Body, Controller, Post } from '@nestjs/common';
import { InjectDataSource } from '@nestjs/typeorm';
import { type DataSource } from 'typeorm';
import request from 'supertest';
import { Idempotent, PhaseRunner } from '../../../lib/index.js';
import { startTypeormApp, type TypeormApp } from '../../support/typeorm-app.js';

/**
 * Adversary, round 50b: a plain read through a TypeORM query runner before the first phase.
 *
 * The app (TypeORM, READ COMMITTED): `POST /runner-one` (`@Idempotent({ oneCommit: true })`)
 * and `POST /runner-def` (`@Idempotent()`) first read a count through a query runner
 * (`createQueryRunner()`, `connect()`, `query('SELECT count(*) ...')`, `release()`), then run
 * a phase that inserts an order, then `finish()`.
 *
 * What happens: 500 `PhaseOrderError` ("started after the request's transaction began (a write
 * outside a phase begins it, and so does a read on a route above READ COMMITTED...)"), stored
 * as the key's answer and replayed for ever; no order. There was no write, and the route is at
 * READ COMMITTED. The runner's `connect()` goes through the request transaction's `connection()`
 * (lazy-transaction.ts:590), which sets `codeTouched` (request-transaction.ts:1063), so
 * `begun` is true (phase-runner.service.ts:153) and the read after it is sent in the request's
 * transaction (`openedByCode`) instead of apart. The same read through `dataSource.query()`
 * runs apart and the phase runs.
 *
 * Expected: phases.md rule 9 and transactions.md: a plain read before the first write runs
 * apart at READ COMMITTED and does not begin the request's transaction; the phase runs: 201,
 * the order once, replayed. A runner's `connect()` sends nothing.
 *
 * Control: `POST /ds-one` and `POST /ds-def`, the same read through `dataSource.query()`: 201.
 *
 * Severity: medium (an error stored as the final answer where an answer is due, with a message
 * that is not true of the handler; nothing runs twice).
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

  private async countWithRunner(): Promise<number> {
    const runner = this.dataSource.createQueryRunner();
    await runner.connect();
    try {
      const rows = (await runner.query('SELECT count(*) AS n FROM orders')) as { n: string }[];
      return Number(rows[0].n);
    } finally {
      await runner.release();
    }
  }

  private async countWithDataSource(): Promise<number> {
    const rows = (await this.dataSource.query('SELECT count(*) AS n FROM orders')) as {
      n: string;
    }[];
    return Number(rows[0].n);
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

  @Post('runner-one')
  @Idempotent({ oneCommit: true })
  async runnerOne(@Body() body: OrderBody) {
    return this.place(body, await this.countWithRunner());
  }

  @Post('runner-def')
  @Idempotent()
  async runnerDef(@Body() body: OrderBody) {
    return this.place(body, await this.countWithRunner());
  }

  @Post('ds-one')
  @Idempotent({ oneCommit: true })
  async dsOne(@Body() body: OrderBody) {
    return this.place(body, await this.countWithDataSource());
  }

  @Post('ds-def')
  @Idempotent()
  async dsDef(@Body() body: OrderBody) {
    return this.place(body, await this.countWithDataSource());
  }
}

describe('adversary 50b: a plain read through a query runner before the first phase', () => {
  let fixture: TypeormApp;
  beforeAll(async () => {
    fixture = await startTypeormApp('adv50b_runner_read', {
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

  it('oneCommit: 201, the order once (was 500 PhaseOrderError stored)', async () => {
    await placesOnce('/runner-one');
  });

  it('default @Idempotent(): 201, the order once (was 500 PhaseOrderError stored)', async () => {
    await placesOnce('/runner-def');
  });

  it('control: oneCommit, the read through dataSource.query(): 201, once', async () => {
    await placesOnce('/ds-one');
  });

  it('control: default, the read through dataSource.query(): 201, once', async () => {
    await placesOnce('/ds-def');
  });
});
