import {
  Body,
  type CallHandler,
  Controller,
  type ExecutionContext,
  GatewayTimeoutException,
  Injectable,
  Module,
  type NestInterceptor,
  Post,
} from '@nestjs/common';
import { APP_INTERCEPTOR } from '@nestjs/core';
import { type Pool } from 'pg';
import {
  catchError,
  firstValueFrom,
  type Observable,
  of,
  throwError,
  timeout,
  TimeoutError,
} from 'rxjs';
import request from 'supertest';
import { IdempotencyModule, Idempotent } from '../../../lib/index.js';
import { type PoolApp, startPoolApp } from '../../support/pool-app.js';

/**
 * What the app does (the pool seam, Express): adversary 15's timeout-after-value app, with the
 * other usual mapping of the global timeout interceptor: a TimeoutError becomes
 * `GatewayTimeoutException` (504) instead of `RequestTimeoutException` (408). An async
 * envelope interceptor awaits `firstValueFrom(next.handle())`, then a slow audit call, then
 * answers `{ success: true, data }`. The handler writes an order and returns it at once.
 *
 * What happens: round 15's fix recognizes an outer timeout after the handler's value only by
 * the status 408. The 504 written during the audit is taken for the adapter's answer to the
 * handler's value, "unwritten": the order is rolled back and the 504 is stored as the key's
 * final answer. Every retry is replayed 504 (`idempotent-replayed: true`): the order can
 * never be placed under that key. The same timeout firing while the handler still runs
 * (control below) is handled: the 504 is not stored, the handler's order commits and is
 * replayed.
 *
 * What should happen (transactions.md, "an outer timeout ... fires while the handler runs,
 * or after its value while an interceptor of the app's still works on it": not stored): the
 * retry, once the work has settled, gets the order (201), written once.
 *
 * Why it matters: a 5xx "retry later" answer stored and replayed for ever for an operation
 * never done; 504 is a common mapping of Nest's timeout interceptor.
 */
let pool: Pool;

@Injectable()
class TimeoutInterceptor implements NestInterceptor {
  intercept(_context: ExecutionContext, next: CallHandler): Observable<unknown> {
    return next.handle().pipe(
      timeout(150),
      catchError((error: unknown) =>
        throwError(() =>
          error instanceof TimeoutError ? new GatewayTimeoutException() : (error as Error),
        ),
      ),
    );
  }
}

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

@Injectable()
class EnvelopeInterceptor implements NestInterceptor {
  async intercept(_context: ExecutionContext, next: CallHandler): Promise<Observable<unknown>> {
    const data = await firstValueFrom(next.handle());
    await sleep(400); // the audit call
    return of({ success: true, data });
  }
}

@Controller()
class OrdersController {
  @Post('orders')
  @Idempotent()
  async create(@Body() body: { item: string; slow?: boolean }) {
    if (body.slow) await sleep(400);
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
  providers: [
    { provide: APP_INTERCEPTOR, useClass: TimeoutInterceptor },
    { provide: APP_INTERCEPTOR, useClass: EnvelopeInterceptor },
  ],
})
class OrdersModule {}

describe('adversary 16: an outer timeout answering 504 after the handler emitted', () => {
  let fixture: PoolApp;

  beforeAll(async () => {
    fixture = await startPoolApp('adv16_timeout_504', {
      module: OrdersModule,
      usePool: (started) => (pool = started),
      setup: async (admin) => {
        await admin.query('CREATE TABLE orders (id serial PRIMARY KEY, item text NOT NULL)');
      },
    });
  }, 60_000);

  afterAll(() => fixture?.close());

  const send = (item: string, slow = false) =>
    request(fixture.app.getHttpServer())
      .post('/orders')
      .set('Idempotency-Key', `key-${item}`)
      .send({ item, slow });

  const kept = async (item: string) =>
    (await fixture.admin.query('SELECT 1 FROM orders WHERE item = $1', [item])).rows.length;

  it('while the handler runs: the 504 is not stored, the retry gets the order (control)', async () => {
    const first = await send('gizmo', true);
    await sleep(1000);
    const retry = await send('gizmo', true);
    expect({ first: first.status, retry: retry.status, kept: await kept('gizmo') }).toEqual({
      first: 504,
      retry: 201,
      kept: 1,
    });
  }, 20_000);

  it('after its value, during the envelope interceptor: the retry gets the order, written once', async () => {
    const first = await send('widget');
    await sleep(800);
    const retry = await send('widget');
    // Observed: first 504, retry 504 replayed (idempotent-replayed: true), no order kept.
    expect({ first: first.status, retry: retry.status, kept: await kept('widget') }).toEqual({
      first: 504,
      retry: 201,
      kept: 1,
    });
  }, 20_000);
});
