import {
  Body,
  type CallHandler,
  Controller,
  type ExecutionContext,
  Injectable,
  Module,
  type NestInterceptor,
  Post,
  RequestTimeoutException,
} from '@nestjs/common';
import { APP_INTERCEPTOR } from '@nestjs/core';
import { type Pool } from 'pg';
import {
  catchError,
  firstValueFrom,
  mergeMap,
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
 * What the app does (the pool seam, Express): two ordinary global interceptors, registered in
 * this order: Nest's documented timeout interceptor (`timeout(150)`, a TimeoutError mapped to
 * `RequestTimeoutException`), then an async envelope interceptor, `const data = await
 * firstValueFrom(next.handle()); await audit(data); return of({ success: true, data })`, whose
 * audit step (an outside call) is slow this time. The handler writes an order and returns it
 * at once.
 *
 * What happens: the handler's value reaches the envelope interceptor, whose firstValueFrom
 * unsubscribes; since round 14 run-owned.ts takes that for "the handler's answer on its way to
 * the adapter" (`emitted`: settle()). The outer timeout then fires during the audit and Nest
 * writes its 408: that 408 is committed with the order as the key's final answer, and every
 * retry is replayed `408` (`idempotent-replayed: true`). A client (client.md: 408 is retried)
 * retries forever and never learns that its order exists.
 *
 * The same with the RxJS form (`next.handle().pipe(mergeMap(async (data) => { await audit();
 * return { success: true, data } }))`, route /operators): the handler completed, settled, and
 * the outer 408 written during the audit is stored the same way.
 *
 * What should happen (transactions.md, "an outer timeout fires while the handler runs": "the
 * outer 408, not stored"; the handler's effects commit with its own answer): the retry, once
 * the work has settled, answers the order (2xx), the order written once.
 *
 * Why it matters: a global timeout plus any async interceptor after the value (the shape round
 * 14 made work) turns a slow moment into a key that answers 408 forever over a kept order: a
 * "retry later" that never ends, for an effect done.
 */
let pool: Pool;

@Injectable()
class TimeoutInterceptor implements NestInterceptor {
  intercept(_context: ExecutionContext, next: CallHandler): Observable<unknown> {
    return next.handle().pipe(
      timeout(150),
      catchError((error: unknown) =>
        throwError(() =>
          error instanceof TimeoutError ? new RequestTimeoutException() : (error as Error),
        ),
      ),
    );
  }
}

const audit = () => new Promise((resolve) => setTimeout(resolve, 400));

@Injectable()
class EnvelopeInterceptor implements NestInterceptor {
  async intercept(context: ExecutionContext, next: CallHandler): Promise<Observable<unknown>> {
    if (context.switchToHttp().getRequest<{ url: string }>().url === '/operators') {
      // The RxJS way: the handler completes, the envelope is mapped after an await.
      return next.handle().pipe(
        mergeMap(async (data: unknown) => {
          await audit();
          return { success: true, data };
        }),
      );
    }
    const data = await firstValueFrom(next.handle());
    await audit();
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

  @Post('operators')
  @Idempotent()
  async createToo(@Body() body: { item: string }) {
    return this.create(body);
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

describe('adversary 15: an outer timeout firing after the handler emitted, during an async interceptor', () => {
  let fixture: PoolApp;

  beforeAll(async () => {
    fixture = await startPoolApp('adv15_timeout_after_value', {
      module: OrdersModule,
      usePool: (started) => (pool = started),
      setup: async (admin) => {
        await admin.query('CREATE TABLE orders (id serial PRIMARY KEY, item text NOT NULL)');
      },
    });
  }, 60_000);

  afterAll(() => fixture?.close());

  const send = (item: string, path = '/orders') =>
    request(fixture.app.getHttpServer())
      .post(path)
      .set('Idempotency-Key', `key-${item}`)
      .send({ item });

  const kept = async (item: string) =>
    (await fixture.admin.query('SELECT 1 FROM orders WHERE item = $1', [item])).rows.length;

  it('the outer 408 is not stored: the retry answers the order, written once', async () => {
    const first = await send('widget');
    await new Promise((resolve) => setTimeout(resolve, 800));
    const retry = await send('widget');
    // Observed: first 408, retry 408 (replayed), one order kept.
    expect({
      first: first.status,
      retry: [retry.status, retry.headers['idempotent-replayed']],
      kept: await kept('widget'),
    }).toEqual({ first: 408, retry: [201, 'true'], kept: 1 });
  }, 20_000);

  it('the same with a mergeMap envelope after the handler completed', async () => {
    const first = await send('gadget', '/operators');
    await new Promise((resolve) => setTimeout(resolve, 800));
    const retry = await send('gadget', '/operators');
    expect({
      first: first.status,
      retry: [retry.status, retry.headers['idempotent-replayed']],
      kept: await kept('gadget'),
    }).toEqual({ first: 408, retry: [201, 'true'], kept: 1 });
  }, 20_000);
});
