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
import {
  concat,
  concatMap,
  firstValueFrom,
  from,
  ignoreElements,
  map,
  type Observable,
  of,
  timer,
} from 'rxjs';
import request from 'supertest';
import { IdempotencyModule, Idempotent } from '../../../lib/index.js';
import { type PoolApp, startPoolApp } from '../../support/pool-app.js';

/**
 * What the app does (the pool seam, Express): a global async envelope interceptor, `const data
 * = await firstValueFrom(next.handle()); return of({ success: true, data })`, and a handler
 * written as an Observable (Nest's documented style) that emits the order it wrote, then goes
 * on with follow-up work (here, 300 ms later, a follow-up row): `concat(insert$, timer(300)
 * .pipe(concatMap(() => followUp$)))`. Without the library, firstValueFrom's unsubscription
 * reaches the handler's observable: the follow-up is cancelled, one row is kept, the answer is
 * 201 with the order.
 *
 * What happens: since round 14 an unsubscription after the handler's value settles the request
 * (`emitted`: settle()) but is not passed on to the handler's subscription (`inner` is never
 * unsubscribed): the answer commits with the order, and the handler goes on; 300 ms later its
 * follow-up insert runs on the pool on its own, autocommitted, outside the request's
 * transaction and the key (before round 14 it was at least in the transaction).
 *
 * What should happen: the cancelled work does not run (as without the library), or at least
 * never writes outside the request's transaction: only the order is kept.
 *
 * Why it matters: work the app cancelled is done anyway, after the answer, outside the
 * exactly-once transaction (a failure there is seen by nobody, a crash leaves half of it).
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
  create(@Body() body: { item: string }) {
    const insert = (item: string) =>
      from(
        pool.query<{ id: number; item: string }>(
          'INSERT INTO orders (item) VALUES ($1) RETURNING id, item',
          [item],
        ),
      ).pipe(map((result) => result.rows[0]));
    return concat(
      insert(body.item),
      timer(300).pipe(
        concatMap(() => insert(`${body.item}-follow-up`)),
        ignoreElements(),
      ),
    );
  }
}

@Module({
  imports: [IdempotencyModule.forRootAsync({ useFactory: () => ({ globalKeys: true, pool }) })],
  controllers: [OrdersController],
  providers: [{ provide: APP_INTERCEPTOR, useClass: EnvelopeInterceptor }],
})
class OrdersModule {}

describe('adversary 15: firstValueFrom over an Observable handler that goes on', () => {
  let fixture: PoolApp;

  beforeAll(async () => {
    fixture = await startPoolApp('adv15_first_value_goes_on', {
      module: OrdersModule,
      usePool: (started) => (pool = started),
      setup: async (admin) => {
        await admin.query('CREATE TABLE orders (id serial PRIMARY KEY, item text NOT NULL)');
      },
    });
  }, 60_000);

  afterAll(() => fixture?.close());

  it('the work the unsubscription cancelled does not run after the answer', async () => {
    const first = await request(fixture.app.getHttpServer())
      .post('/orders')
      .set('Idempotency-Key', 'key-widget')
      .send({ item: 'widget' });
    await new Promise((resolve) => setTimeout(resolve, 800));
    const rows = await fixture.admin.query<{ item: string }>('SELECT item FROM orders ORDER BY id');
    // Observed: widget and widget-follow-up (the latter autocommitted after the answer).
    expect({
      first: [first.status, first.body.data?.item],
      kept: rows.rows.map((row) => row.item),
    }).toEqual({ first: [201, 'widget'], kept: ['widget'] });
  }, 20_000);
});
