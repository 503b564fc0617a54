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
 * What the app does (the pool seam, Express): the global async interceptor of
 * adversary14-async-interceptor-first-value (`await firstValueFrom(next.handle())`, then
 * `of({ success: true, data })`), on a route whose answer is larger than the stored answer's
 * limit (`maxResponseBytes`, here 200 bytes for the test; 1 MiB by default): a handler writes
 * an order and returns it with its lines.
 *
 * What happens: `firstValueFrom` unsubscribes before the handler's observable completes;
 * run-owned.ts takes that for an outer answer (an outer timeout's), lets the response through
 * at once and detaches the handler: the client receives `201 { success: true, data }` before
 * the request's transaction has committed. settleDetached then finds the answer too large,
 * rolls the order back and stores the 500 "too large": the client was told the order was
 * placed, it does not exist, and every retry answers 500.
 *
 * What should happen: as without the interceptor: the too-large answer is the request's 500,
 * nothing kept, and every retry gets that same 500 (what the first request answered is what
 * is stored, and a success is only sent once its effects have committed).
 *
 * Why it matters: a success sent before the commit it reports: any failure of that commit (here
 * the size limit; a commit-time error alike) leaves the client with a 201 for an order that
 * was never kept.
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
    const lines = Array.from({ length: 20 }, (_, n) => ({ line: n + 1, sku: `sku-${n + 1}` }));
    return { ...rows[0], lines };
  }
}

@Module({
  imports: [
    IdempotencyModule.forRootAsync({
      useFactory: () => ({ globalKeys: true, pool, maxResponseBytes: 200 }),
    }),
  ],
  controllers: [OrdersController],
  providers: [{ provide: APP_INTERCEPTOR, useClass: EnvelopeInterceptor }],
})
class OrdersModule {}

describe('adversary 14: firstValueFrom interceptor, a success sent before its commit, which then fails', () => {
  let fixture: PoolApp;

  beforeAll(async () => {
    fixture = await startPoolApp('adv14_async_interceptor_large', {
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

  const keptOrders = async (item: string) =>
    (await fixture.admin.query('SELECT 1 FROM orders WHERE item = $1', [item])).rows.length;

  it('the first answer is the one stored and replayed; a 201 only for a kept order', async () => {
    const first = await send('widget');
    const retry = await send('widget');
    const kept = await keptOrders('widget');
    // Observed: first 201 { success: true, … }, retry 500 (too large), kept 0.
    expect({
      replayed: [retry.status, retry.text === first.text],
      successKept: first.status < 300 ? kept === 1 : kept === 0,
    }).toEqual({ replayed: [first.status, true], successKept: true });
  }, 20_000);
});
