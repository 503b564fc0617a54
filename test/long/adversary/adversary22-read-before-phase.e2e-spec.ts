import { Body, Controller, Module, Post } from '@nestjs/common';
import { type Pool } from 'pg';
import request from 'supertest';
import { IdempotencyModule, Idempotent, PhaseRunner } from '../../../lib/index.js';
import { type PoolApp, startPoolApp } from '../../support/pool-app.js';

/**
 * Adversary, round 22: on a `oneCommit` route, a handler that reads before its first phase
 * (loads the order it is about to charge, the usual shape of a payment handler) fails with
 * `PhaseOrderError` (500, stored as the key's answer: the retry replays the 500, the charge
 * never happens). Without `oneCommit` the same handler works: its plain read runs apart and
 * the phase runs.
 *
 * What the app does (Express, pool): `POST /charges` reads the order (`SELECT ... FROM
 * orders`), then `phases.call('psp', ...)` to charge the provider with the derived key, then
 * writes the charge.
 *
 * What happens: with the claim's transaction open (`beginWithClaim` sets `opening`),
 * pool-transaction.ts:214 (`!this.opening && ... isPlainRead(text)`) no longer runs the read
 * apart: it goes to the request's connection (`connection()`, request-transaction.ts:793, sets `codeTouched`), so the
 * transaction counts as begun by its code. phase-runner.service.ts:119 (`if
 * (context.transaction?.begun) throw new PhaseOrderError(phase)`) then refuses the phase, and
 * `commitClaimAlone` (request-transaction.ts:277-280) could not commit the claim alone any
 * more either ("only before any statement"). TypeORM's seam has the same condition
 * (lazy-transaction.ts:446, `!this.opening && ...`), so a repository read there does the same.
 *
 * What should happen: idempotency-options.interface.ts (`oneCommit`): "the first
 * `PhaseRunner.run()` or `call()` commits the claim alone first (then as without it)". Without
 * it, a read before the first phase is allowed (runs apart, `PhaseOrderError`'s own message
 * names only writes, and reads on a route above READ COMMITTED); with it, the same handler
 * must run the same way.
 *
 * Why it matters: phases are the library's tool for exactly the routes that call other
 * systems (payments); turning `oneCommit` on module-wide breaks each such route that reads
 * before it charges, and the 500 is stored, so the client cannot retry its way out.
 *
 * Severity: high for the routes hit (every request fails, permanently per key; no double
 * effect).
 */
let pool: Pool;
let providerCalls: string[] = [];

@Controller()
class ChargesController {
  constructor(private readonly phases: PhaseRunner) {}

  private async charge(order: number) {
    const { rows } = await pool.query<{ amount: number }>(
      'SELECT amount FROM orders WHERE id = $1',
      [order],
    );
    const paid = await this.phases.call('psp', async ({ idempotencyKey }) => {
      providerCalls.push(idempotencyKey);
      return { paid: rows[0].amount };
    });
    await pool.query('INSERT INTO charges (order_id, amount) VALUES ($1, $2)', [order, paid.paid]);
    return paid;
  }

  @Post('charges-one-commit')
  @Idempotent({ oneCommit: true })
  oneCommit(@Body() body: { order: number }) {
    return this.charge(body.order);
  }

  @Post('charges')
  @Idempotent()
  twoCommits(@Body() body: { order: number }) {
    return this.charge(body.order);
  }
}

@Module({
  imports: [IdempotencyModule.forRootAsync({ useFactory: () => ({ globalKeys: true, pool }) })],
  controllers: [ChargesController],
})
class ChargesModule {}

describe('adversary 22: a read before the first phase on a oneCommit route', () => {
  let fixture: PoolApp;

  beforeAll(async () => {
    fixture = await startPoolApp('adv22_read_before_phase', {
      module: ChargesModule,
      max: 4,
      usePool: (started) => (pool = started),
      setup: async (admin) => {
        await admin.query('CREATE TABLE orders (id int PRIMARY KEY, amount int NOT NULL)');
        await admin.query('INSERT INTO orders VALUES (1, 100), (2, 200)');
        await admin.query('CREATE TABLE charges (order_id int NOT NULL, amount int NOT NULL)');
      },
    });
  }, 60_000);

  afterAll(async () => {
    await fixture?.close();
  });

  beforeEach(() => {
    providerCalls = [];
  });

  const post = (path: string, key: string, body: object) =>
    request(fixture.app.getHttpServer()).post(path).set('Idempotency-Key', key).send(body);
  const charges = async (order: number) =>
    Number(
      (await fixture.admin.query('SELECT count(*) FROM charges WHERE order_id = $1', [order]))
        .rows[0].count,
    );

  it('control: without oneCommit, the read runs apart and the phase runs', async () => {
    const answer = await post('/charges', 'adv22-read-control', { order: 1 });
    expect(answer.status).toBe(201);
    expect(answer.body).toEqual({ paid: 100 });
    expect(providerCalls).toHaveLength(1);
    expect(await charges(1)).toBe(1);
  });

  it('oneCommit: the same handler charges once (fails: 500 PhaseOrderError, stored)', async () => {
    const answer = await post('/charges-one-commit', 'adv22-read-one', { order: 2 });
    const retry = await post('/charges-one-commit', 'adv22-read-one', { order: 2 });
    const stored = (
      await fixture.admin.query('SELECT response_code FROM idempotency_keys WHERE key = $1', [
        'adv22-read-one',
      ])
    ).rows[0] as { response_code: number } | undefined;
    // Received: [500, 500] (the second a replay), no provider call, no charge, 500 stored.
    expect({
      statuses: [answer.status, retry.status],
      calls: providerCalls.length,
      charges: await charges(2),
      stored: stored?.response_code,
    }).toEqual({ statuses: [201, 201], calls: 1, charges: 1, stored: 201 });
  });
});
