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
 * What the app does (the pool seam, Fastify, docs: "on Express and Fastify alike"): adversary
 * 13's unwritten-value-envelope-filter on the other adapter. One global catch-all exception
 * filter answers every error as `200 { success: false, message }` (`reply.status(200).send()`).
 * A handler writes an order and returns the row with a BigInt id: Fastify's serializer cannot
 * write it, and the error reaches the app's filter, which answers `200 { success: false }`.
 *
 * What happens: 265892b marks a value whose write threw only on Express (watchJsonWrite wraps
 * `res.json()`; its comment: "Fastify serializes after Nest's filters have run, so its own 500
 * is what is written there"). On Fastify the serializer's TypeError goes to Nest's filters,
 * the app's filter answers 200, and isUnwrittenValue (status < 500) keeps the effects: the
 * order commits with the stored `{ success: false }`, replayed to every retry. The same
 * handler throwing (the control) is rolled back with the same envelope.
 *
 * What should happen: as on Express since 265892b: the order not kept, the envelope stored
 * and replayed.
 *
 * Why it matters: the client is told, for ever, that the order failed, and it exists; the
 * fix holds on one adapter only.
 */
let pool: Pool;

/** Fastify's reply, as much of it as the filter uses. */
type FastifyReply = { status(code: number): { send(body: unknown): void } };

@Catch()
class EnvelopeFilter implements ExceptionFilter {
  catch(error: unknown, host: ArgumentsHost) {
    const message =
      error instanceof HttpException ? error.message : 'something went wrong, please contact us';
    host.switchToHttp().getResponse<FastifyReply>().status(200).send({ success: false, message });
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

describe('adversary 14: Fastify, a value that could not be written, answered 200 by an envelope filter', () => {
  let fixture: PoolApp;

  beforeAll(async () => {
    fixture = await startPoolApp('adv14_fastify_envelope', {
      module: OrdersModule,
      usePool: (started) => (pool = started),
      adapter: 'fastify',
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
