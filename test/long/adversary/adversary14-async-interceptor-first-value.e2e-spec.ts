import {
  Body,
  type CallHandler,
  Controller,
  type ExecutionContext,
  Injectable,
  Module,
  type NestInterceptor,
  Post,
} from '@nestjs/common';
import { APP_INTERCEPTOR } from '@nestjs/core';
import { type Pool } from 'pg';
import { firstValueFrom, type Observable, of } from 'rxjs';
import request from 'supertest';
import { IdempotencyModule, Idempotent } from '../../../lib/index.js';
import { type PoolApp, startPoolApp } from '../../support/pool-app.js';

/**
 * What the app does (the pool seam, Express): a global response interceptor written the async
 * way, `const data = await firstValueFrom(next.handle()); return of({ success: true, data })`
 * (an envelope, an audit log of the answer, a lookup before answering: async/await instead of
 * RxJS operators). A handler writes an order and returns the row. Without the library: 201
 * `{ success: true, data: { id, item } }`.
 *
 * What happens: under @Idempotent() the first answer is that envelope, but `firstValueFrom`
 * unsubscribes from the handler's observable once it has its value, before the observable
 * completes; run-owned.ts takes an unsubscription before the handler settled for an answer
 * "from outside" (an outer timeout's), detaches the handler, and settleDetached stores the
 * handler's raw value: every retry is replayed `201 { id, item }` (`idempotent-replayed:
 * true`), not the envelope the first request answered.
 *
 * What should happen: every retry answers exactly what the first request answered (the
 * envelope), the order written once.
 *
 * Why it matters: "every answer after the first final one identical" fails for every route
 * of an app with one ordinary async interceptor: a client reading `body.data.id` gets
 * `undefined` on a retry (it reads the first answer's shape), though nothing failed.
 */
let pool: Pool;

@Injectable()
class EnvelopeInterceptor implements NestInterceptor {
  async intercept(_context: ExecutionContext, next: CallHandler): Promise<Observable<unknown>> {
    const data = await firstValueFrom(next.handle());
    return of({ success: true, data });
  }
}

@Controller()
class OrdersController {
  @Post('orders')
  @Idempotent()
  async create(@Body() body: { item: string }) {
    const { rows } = await pool.query<{ id: number; item: string }>(
      'INSERT INTO orders (item) VALUES ($1) RETURNING id, item',
      [body.item],
    );
    return rows[0];
  }
}

@Module({
  imports: [IdempotencyModule.forRootAsync({ useFactory: () => ({ globalKeys: true, pool }) })],
  controllers: [OrdersController],
  providers: [{ provide: APP_INTERCEPTOR, useClass: EnvelopeInterceptor }],
})
class OrdersModule {}

describe('adversary 14: a global async interceptor reading the handler with firstValueFrom', () => {
  let fixture: PoolApp;

  beforeAll(async () => {
    fixture = await startPoolApp('adv14_async_interceptor', {
      module: OrdersModule,
      usePool: (started) => (pool = started),
      setup: async (admin) => {
        await admin.query('CREATE TABLE orders (id serial PRIMARY KEY, item text NOT NULL)');
      },
    });
  }, 60_000);

  afterAll(() => fixture?.close());

  const send = (item: string) =>
    request(fixture.app.getHttpServer())
      .post('/orders')
      .set('Idempotency-Key', `key-${item}`)
      .send({ item });

  const kept = async (item: string) =>
    (await fixture.admin.query('SELECT 1 FROM orders WHERE item = $1', [item])).rows.length;

  it('the retry answers what the first request answered, the order written once', async () => {
    const first = await send('widget');
    const retry = await send('widget');
    // Observed: first 201 { success: true, data: {…} }, retry 201 { id, item }.
    expect({
      first: [first.status, first.body.success, first.body.data?.item],
      retry: [retry.status, retry.text === first.text],
      kept: await kept('widget'),
    }).toEqual({ first: [201, true, 'widget'], retry: [201, true], kept: 1 });
  }, 20_000);
});
