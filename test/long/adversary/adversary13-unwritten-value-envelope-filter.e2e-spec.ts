import {
  type ArgumentsHost,
  Body,
  Catch,
  Controller,
  type ExceptionFilter,
  HttpException,
  Module,
  Post,
} from '@nestjs/common';
import { APP_FILTER } from '@nestjs/core';
import { type Pool } from 'pg';
import request from 'supertest';
import { IdempotencyModule, Idempotent } from '../../../lib/index.js';
import { type PoolApp, startPoolApp } from '../../support/pool-app.js';

/**
 * What a user does (the pool seam, Express): the app answers every error in its API's
 * envelope, `200 { success: false, message }`, from one global catch-all exception filter (a
 * common house style: clients read `success`, not the status). A handler writes an order and
 * returns the row, whose id is a BigInt (an int8 id as Prisma or a BigInt-mapping driver
 * hands it back): the adapter cannot write it (JSON.stringify throws), and the filter answers
 * `200 { success: false }`.
 *
 * What happens: 171a89b rolls such a request back only when the answer written in place of
 * the value is a 5xx (isUnwrittenValue: `status < 500` is "never this"). Here it is the
 * filter's 200, so the order commits with a stored `{ success: false }` replayed for ever: the
 * client is told, on every retry, that the request failed, and the order exists. The same
 * handler throwing instead (the control) is rolled back with the same stored envelope.
 *
 * What should happen: a value the adapter could not write is a failed request whatever status
 * the app's filter gives it: the order not kept, the envelope stored and replayed.
 *
 * Why it matters: the rule keys on the status, which the app's filter owns, not on what
 * happened (the handler's value was never written).
 */
let pool: Pool;

/** Express's response, as much of it as the filter uses. */
type ExpressResponse = { status(code: number): { json(body: unknown): void } };

@Catch()
class EnvelopeFilter implements ExceptionFilter {
  catch(error: unknown, host: ArgumentsHost) {
    const message =
      error instanceof HttpException ? error.message : 'something went wrong, please contact us';
    host
      .switchToHttp()
      .getResponse<ExpressResponse>()
      .status(200)
      .json({ success: false, message });
  }
}

@Controller()
class OrdersController {
  @Post('orders')
  @Idempotent()
  async create(@Body() body: { item: string }) {
    const { rows } = await pool.query<{ id: string }>(
      'INSERT INTO orders (item) VALUES ($1) RETURNING id',
      [body.item],
    );
    return { id: BigInt(rows[0].id), item: body.item };
  }

  @Post('orders-throwing')
  @Idempotent()
  async createThrowing(@Body() body: { item: string }) {
    await pool.query('INSERT INTO orders (item) VALUES ($1)', [body.item]);
    throw new Error('a bug after the write');
  }
}

@Module({
  imports: [IdempotencyModule.forRootAsync({ useFactory: () => ({ globalKeys: true, pool }) })],
  controllers: [OrdersController],
  providers: [{ provide: APP_FILTER, useClass: EnvelopeFilter }],
})
class OrdersModule {}

describe('adversary 13: a value that could not be written, answered 200 by an envelope filter', () => {
  let fixture: PoolApp;

  beforeAll(async () => {
    fixture = await startPoolApp('adv13_envelope_filter', {
      module: OrdersModule,
      usePool: (started) => (pool = started),
      setup: async (admin) => {
        await admin.query('CREATE TABLE orders (id bigserial PRIMARY KEY, item text NOT NULL)');
      },
    });
  }, 60_000);

  afterAll(() => fixture?.close());

  const send = (path: string, item: string) =>
    request(fixture.app.getHttpServer())
      .post(path)
      .set('Idempotency-Key', `key-${item}`)
      .send({ item });

  const kept = async (item: string) =>
    (await fixture.admin.query('SELECT 1 FROM orders WHERE item = $1', [item])).rows.length;

  it('a handler that throws (control): the envelope stored, nothing kept', async () => {
    const first = await send('/orders-throwing', 'thrown');
    const retry = await send('/orders-throwing', 'thrown');
    expect({
      first: [first.status, first.body.success],
      same: retry.text === first.text,
      kept: await kept('thrown'),
    }).toEqual({ first: [200, false], same: true, kept: 0 });
  }, 20_000);

  it('a BigInt value: the envelope stored, nothing kept', async () => {
    const first = await send('/orders', 'bigint');
    const retry = await send('/orders', 'bigint');
    // Observed: kept 1 (the order committed with the stored { success: false }).
    expect({
      first: [first.status, first.body.success],
      same: retry.text === first.text,
      kept: await kept('bigint'),
    }).toEqual({ first: [200, false], same: true, kept: 0 });
  }, 20_000);
});
