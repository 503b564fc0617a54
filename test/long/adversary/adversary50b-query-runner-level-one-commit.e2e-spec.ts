import { Body, Controller, Post } from '@nestjs/common';
import { InjectDataSource } from '@nestjs/typeorm';
import { type DataSource, type EntityManager } from 'typeorm';
import request from 'supertest';
import { Idempotent, PhaseRunner } from '../../../lib/index.js';
import { startTypeormApp, type TypeormApp } from '../../support/typeorm-app.js';

/**
 * Adversary, round 50b: TypeORM's manual transaction (`createQueryRunner()`, `connect()`,
 * `startTransaction('REPEATABLE READ')`) as the first database work of a `oneCommit` route.
 *
 * The app (TypeORM): `POST /phase-one` (`@Idempotent({ oneCommit: true })`) runs a first
 * phase whose work opens a query runner as TypeORM's docs show it, `await qr.connect(); await
 * qr.startTransaction('REPEATABLE READ')`, inserts an order, commits and releases the runner;
 * then `finish()`. `POST /handler-one` does the same as the handler's own first database work,
 * without phases.
 *
 * What happens: 500 (`IsolationLevelRefusedError`: "the request's transaction already began at
 * READ COMMITTED"), stored as the key's answer and replayed for ever; no order. On a
 * `oneCommit` route the transaction has begun with the claim, and a nested transaction that
 * asks for a stronger level before the handler's first statement commits the claim alone and
 * begins anew at that level (request-transaction.ts `askIsolation`, :1035-1038): but only
 * while `!this.codeTouched`, and the runner's `connect()` (lazy-transaction.ts `open`, through
 * `connection()`, lazy-transaction.ts:590, request-transaction.ts:1063) has set `codeTouched` already, though it sent
 * nothing. So the level is refused (:1040). `manager.transaction('REPEATABLE READ', ...)`,
 * which connects nothing first, passes on the same route; so does the runner on a default
 * route, whose transaction has not begun when the runner asks.
 *
 * Expected: as transactions.md says ("A nested transaction that asks for a stronger isolation
 * level before the handler's first statement" commits the claim alone first) and as on the
 * default route: 201, the order once, replayed. A runner's `connect()` is not a statement.
 *
 * Control: the same handlers on `@Idempotent()` routes: 201. `manager.transaction('REPEATABLE
 * READ', ...)` as the first phase's work on the `oneCommit` route: 201.
 *
 * Severity: medium (an error stored as the final answer where an answer is due; nothing runs
 * twice; the guide's own recipe for a manual transaction).
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

  /** TypeORM's manual transaction, at REPEATABLE READ. */
  private async placeWithRunner(sku: string): Promise<{ id: number }> {
    const runner = this.dataSource.createQueryRunner();
    await runner.connect();
    try {
      await runner.startTransaction('REPEATABLE READ');
      const rows = (await runner.query('INSERT INTO orders (sku) VALUES ($1) RETURNING id', [
        sku,
      ])) as { id: number }[];
      await runner.commitTransaction();
      return { id: rows[0].id };
    } catch (error) {
      await runner.rollbackTransaction();
      throw error;
    } finally {
      await runner.release();
    }
  }

  private async placeWithManager(manager: EntityManager, sku: string): Promise<{ id: number }> {
    return manager.transaction('REPEATABLE READ', async (inner) => {
      const rows = (await inner.query('INSERT INTO orders (sku) VALUES ($1) RETURNING id', [
        sku,
      ])) as { id: number }[];
      return { id: rows[0].id };
    });
  }

  private async inPhase(body: OrderBody) {
    const order = await this.phases.run('placed', () => this.placeWithRunner(body.sku));
    return this.phases.finish(async () => ({ ...order, sku: body.sku }));
  }

  @Post('phase-one')
  @Idempotent({ oneCommit: true })
  phaseOne(@Body() body: OrderBody) {
    return this.inPhase(body);
  }

  @Post('phase-def')
  @Idempotent()
  phaseDef(@Body() body: OrderBody) {
    return this.inPhase(body);
  }

  @Post('handler-one')
  @Idempotent({ oneCommit: true })
  async handlerOne(@Body() body: OrderBody) {
    return { ...(await this.placeWithRunner(body.sku)), sku: body.sku };
  }

  @Post('handler-def')
  @Idempotent()
  async handlerDef(@Body() body: OrderBody) {
    return { ...(await this.placeWithRunner(body.sku)), sku: body.sku };
  }

  @Post('manager-one')
  @Idempotent({ oneCommit: true })
  async managerOne(@Body() body: OrderBody) {
    const order = await this.phases.run('placed', (manager) =>
      this.placeWithManager(manager, body.sku),
    );
    return this.phases.finish(async () => ({ ...order, sku: body.sku }));
  }
}

describe('adversary 50b: a query runner at REPEATABLE READ as the first work of a oneCommit route', () => {
  let fixture: TypeormApp;
  beforeAll(async () => {
    fixture = await startTypeormApp('adv50b_runner_level', {
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
    const key = `runner${path.replace('/', '-')}`;
    const first = await post(path, key);
    expect({ status: first.status, body: first.body as unknown }).toEqual({
      status: 201,
      body: { id: expect.any(Number), sku: key },
    });
    const again = await post(path, key);
    expect(again.headers['idempotent-replayed']).toBe('true');
    expect(again.body).toEqual(first.body);
    expect(await orders(key)).toBe(1);
  };

  it('oneCommit, first phase: 201, the order once (was 500 IsolationLevelRefusedError stored)', async () => {
    await placesOnce('/phase-one');
  });

  it('oneCommit, handler: 201, the order once (was 500 IsolationLevelRefusedError stored)', async () => {
    await placesOnce('/handler-one');
  });

  it('control: the same first phase on a default route: 201, once', async () => {
    await placesOnce('/phase-def');
  });

  it('control: the same handler on a default route: 201, once', async () => {
    await placesOnce('/handler-def');
  });

  it("control: oneCommit, manager.transaction('REPEATABLE READ') as the first phase: 201, once", async () => {
    await placesOnce('/manager-one');
  });
});
