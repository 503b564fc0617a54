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
import { mergeMap, type Observable } from 'rxjs';
import request from 'supertest';
import { IdempotencyModule, Idempotent } from '../../../lib/index.js';
import { type PoolApp, startPoolApp } from '../../support/pool-app.js';

/**
 * What the app does (the pool seam, Express, `leaseMs: 600`, the heartbeat on as by default):
 * a global envelope interceptor, `next.handle().pipe(mergeMap(async (data) => { await
 * audit(data); return { success: true, data } }))`, whose audit call (an outside service) is
 * slow this time (1.5 s). The handler writes an order, sends its confirmation e-mail (counted
 * here) and returns the order at once. While the first request is in its audit step, the
 * client's retry (same key) arrives.
 *
 * What happens: the handler completing settles it (run-owned.ts settle()), which stops the
 * heartbeat, though the request still holds its key and its transaction is still open until
 * the interceptor's envelope is written. The lease runs out during the audit; the retry takes
 * the key over as if the worker had died and runs the handler a second time (a second e-mail);
 * the first request, finishing after it, is answered 409 lease_lost and rolled back.
 *
 * What should happen (idempotency-options: "with heartbeat (the default) a live worker renews
 * it"; transactions.md: a live worker's heartbeat renews the lease): the retry during the
 * audit gets 409 key_in_progress, the first gets its 201, the handler runs once.
 *
 * Why it matters: a live request with an ordinary slow interceptor after its handler loses its
 * key: the handler's outside effects (e-mail, payment call) run twice, and the first client
 * gets a 409 for an order it placed. Medium: needs an interceptor step longer than the lease.
 */
let pool: Pool;
let runs = 0;

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

@Injectable()
class EnvelopeInterceptor implements NestInterceptor {
  intercept(context: ExecutionContext, next: CallHandler): Observable<unknown> {
    if (context.switchToHttp().getRequest<{ url: string }>().url === '/slow') {
      return next.handle();
    }
    return next.handle().pipe(
      mergeMap(async (data: unknown) => {
        await sleep(1500); // the audit call
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
    const { rows } = await pool.query<{ id: number; item: string }>(
      'INSERT INTO orders (item) VALUES ($1) RETURNING id, item',
      [body.item],
    );
    runs += 1; // the confirmation e-mail
    return rows[0];
  }

  @Post('slow')
  @Idempotent()
  async slow(@Body() body: { item: string }) {
    await sleep(1500); // the same slow step, in the handler
    return this.create(body);
  }
}

@Module({
  imports: [
    IdempotencyModule.forRootAsync({
      useFactory: () => ({ globalKeys: true, pool, leaseMs: 600 }),
    }),
  ],
  controllers: [OrdersController],
  providers: [{ provide: APP_INTERCEPTOR, useClass: EnvelopeInterceptor }],
})
class OrdersModule {}

describe('adversary 16: the heartbeat stops when the handler completes, before its answer', () => {
  let fixture: PoolApp;

  beforeAll(async () => {
    fixture = await startPoolApp('adv16_heartbeat_settle', {
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

  it('the same slow step inside the handler: the heartbeat keeps the key (control)', async () => {
    const first = send('gadget', '/slow').then((answer) => answer);
    await sleep(1100);
    const retry = await send('gadget', '/slow');
    const answered = await first;
    expect({
      first: answered.status,
      retry: retry.status,
      runs,
      kept: await kept('gadget'),
    }).toEqual({ first: 201, retry: 409, runs: 1, kept: 1 });
    runs = 0;
  }, 20_000);

  it('a retry during the slow envelope gets 409 key_in_progress; the handler runs once', async () => {
    const first = send('widget').then((answer) => answer);
    await sleep(1100);
    const retry = await send('widget');
    const answered = await first;
    // Observed: first 409 (lease_lost), retry 201, runs 2.
    expect({
      first: answered.status,
      retry: retry.status,
      runs,
      kept: await kept('widget'),
    }).toEqual({ first: 201, retry: 409, runs: 1, kept: 1 });
  }, 20_000);
});
