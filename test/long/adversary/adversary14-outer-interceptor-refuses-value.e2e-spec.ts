import {
  Body,
  type CallHandler,
  Controller,
  type ExecutionContext,
  Injectable,
  InternalServerErrorException,
  Module,
  type NestInterceptor,
  Post,
} from '@nestjs/common';
import { APP_INTERCEPTOR } from '@nestjs/core';
import { type Pool } from 'pg';
import { map, type Observable } from 'rxjs';
import request from 'supertest';
import { IdempotencyModule, Idempotent } from '../../../lib/index.js';
import { type PoolApp, startPoolApp } from '../../support/pool-app.js';

/**
 * What the app does (the pool seam, Express, Nest's own exception handling): one global
 * response interceptor checks each answer against its DTO before wrapping it as
 * `{ success: true, data }` (what nestjs-zod's ZodSerializerInterceptor does: a value that does
 * not match is a bug, thrown as an InternalServerErrorException). A handler writes an order and
 * returns the row, whose `total` the DTO says is a number but node-postgres hands back as a
 * string (numeric): the interceptor throws after the handler returned, and Nest answers 500.
 * Without the library: 500, and the order is written (no transaction of the request's).
 *
 * What happens: under @Idempotent() the first answer is Nest's 500, but the order commits and
 * the key stores `201 {"id":…,"item":…,"total":"9.99"}`, the handler's raw row, which no
 * client ever received and which the app's interceptor refused; every retry replays that 201
 * (`idempotent-replayed: true`). isUnwrittenValue means a 5xx written after the handler
 * returned a value to roll its effects back with the error stored; an interceptor outside the
 * library's refusing the value never reaches it.
 *
 * What should happen: the promise: every answer after the first final one identical to it,
 * and nothing kept from a request that failed: the 500 stored and replayed, the order rolled
 * back (as for a handler's own 500 bug).
 *
 * Why it matters: the client is told the order failed, a retry is told it was created, with
 * a body in a shape the app never sends; a global serializing or response-validating
 * interceptor (ClassSerializerInterceptor, nestjs-zod) is ordinary Nest.
 */
let pool: Pool;

/** The answer checked against its DTO (`total: number`), then wrapped. */
@Injectable()
class ResponseInterceptor implements NestInterceptor {
  intercept(_context: ExecutionContext, next: CallHandler): Observable<unknown> {
    return next.handle().pipe(
      map((data: { total?: unknown }) => {
        if (typeof data.total !== 'number') {
          throw new InternalServerErrorException('the answer does not match OrderDto');
        }
        return { success: true, data };
      }),
    );
  }
}

@Controller()
class OrdersController {
  @Post('orders')
  @Idempotent()
  async create(@Body() body: { item: string }) {
    const { rows } = await pool.query<{ id: number; item: string; total: string }>(
      'INSERT INTO orders (item, total) VALUES ($1, 9.99) RETURNING id, item, total',
      [body.item],
    );
    return rows[0];
  }

  @Post('orders-throwing')
  @Idempotent()
  async createThrowing(@Body() body: { item: string }) {
    await pool.query('INSERT INTO orders (item, total) VALUES ($1, 9.99)', [body.item]);
    throw new Error('a bug after the write');
  }
}

@Module({
  imports: [IdempotencyModule.forRootAsync({ useFactory: () => ({ globalKeys: true, pool }) })],
  controllers: [OrdersController],
  providers: [{ provide: APP_INTERCEPTOR, useClass: ResponseInterceptor }],
})
class OrdersModule {}

describe('adversary 14: a value refused by an outer response interceptor (Nest 500)', () => {
  let fixture: PoolApp;

  beforeAll(async () => {
    fixture = await startPoolApp('adv14_outer_interceptor', {
      module: OrdersModule,
      usePool: (started) => (pool = started),
      setup: async (admin) => {
        await admin.query(
          'CREATE TABLE orders (id serial PRIMARY KEY, item text NOT NULL, total numeric NOT NULL)',
        );
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

  it('a handler that throws (control): the 500 stored, nothing kept', async () => {
    const first = await send('/orders-throwing', 'thrown');
    const retry = await send('/orders-throwing', 'thrown');
    expect({
      first: first.status,
      same: retry.status === first.status && retry.text === first.text,
      kept: await kept('thrown'),
    }).toEqual({ first: 500, same: true, kept: 0 });
  }, 20_000);

  it('a value the interceptor refused: the 500 stored and replayed, nothing kept', async () => {
    const first = await send('/orders', 'refused');
    const retry = await send('/orders', 'refused');
    // Observed: first 500, retry 201 with the raw row, kept 1.
    expect({
      first: first.status,
      retry: [retry.status, retry.text === first.text],
      kept: await kept('refused'),
    }).toEqual({ first: 500, retry: [500, true], kept: 0 });
  }, 20_000);
});
