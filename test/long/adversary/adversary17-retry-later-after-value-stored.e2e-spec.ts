import {
  Body,
  type CallHandler,
  Controller,
  type ExecutionContext,
  Injectable,
  Module,
  type NestInterceptor,
  Post,
  UseInterceptors,
} from '@nestjs/common';
import { APP_FILTER, APP_INTERCEPTOR } from '@nestjs/core';
import { type Pool } from 'pg';
import { mergeMap, type Observable } from 'rxjs';
import request from 'supertest';
import {
  IdempotencyErrorFilter,
  IdempotencyModule,
  Idempotent,
  RetryLaterError,
} from '../../../lib/index.js';
import { type PoolApp, startPoolApp } from '../../support/pool-app.js';

/**
 * What the app does (the pool seam, Express, `IdempotencyErrorFilter` registered globally as
 * the docs show): an audit interceptor records every answer in an outside audit service
 * before it goes out, and when that service is down it throws the library's own
 * `RetryLaterError` ("a dependency is down": problems.md, "retry the same request with the
 * same key"). The audit service is down for the first attempt and back for the retry. The
 * handler writes an order and returns it.
 *
 * What happens: with the audit interceptor global (APP_INTERCEPTOR, so outside the
 * method-level interceptor of @Idempotent()), its 503 retry_later is written after the
 * handler's value; run-owned.ts reads it with isUnwrittenValue ("a 5xx written in place of
 * the value": the value could not be written) and stores it as the key's final answer, the
 * order rolled back. Every retry replays `503 retry_later` ("nothing was stored, retry with the
 * same key"), with `Idempotent-Replayed: true`, for ever: the order can never be placed under
 * that key.
 *
 * What should happen (problems.md `retry_later`: "nothing stored; retry the same request with
 * the same key"; transactions.md: `RetryLaterError` → "rolled back, nothing stored, lease
 * released; the retry runs it once"; storeIf's doc stores 5xx answers, but a `retry_later` is
 * by its own definition never stored): the first attempt 503, rolled back, key given back; the
 * retry runs the handler and gets 201. The control, the same interceptor on the route inside
 * @Idempotent() (`@UseInterceptors(Audit)` above it), does exactly that.
 *
 * Why it matters: a transient outage of any dependency an app interceptor calls after the
 * handler (audit, outbox notify, metrics sink) poisons the key for ever with an answer that
 * tells the client to retry it. Likely: audit/envelope interceptors are usually global, and
 * `RetryLaterError` is the documented way to say a dependency is down.
 */
let pool: Pool;
let auditDown = false;

@Injectable()
class AuditInterceptor implements NestInterceptor {
  intercept(_context: ExecutionContext, next: CallHandler): Observable<unknown> {
    return next.handle().pipe(
      mergeMap(async (data: unknown) => {
        await Promise.resolve(); // the audit service's call
        if (auditDown) throw new RetryLaterError('The audit service is down; retry later.');
        return data;
      }),
    );
  }
}

/** The global one: it audits /orders only (the control route has its own, on the method). */
@Injectable()
class GlobalAuditInterceptor extends AuditInterceptor {
  override intercept(context: ExecutionContext, next: CallHandler): Observable<unknown> {
    if (context.switchToHttp().getRequest<{ url: string }>().url !== '/orders') {
      return next.handle();
    }
    return super.intercept(context, next);
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

  @Post('orders-audited-inside')
  @UseInterceptors(AuditInterceptor)
  @Idempotent()
  createInside(@Body() body: { item: string }) {
    return this.create(body);
  }
}

@Module({
  imports: [IdempotencyModule.forRootAsync({ useFactory: () => ({ globalKeys: true, pool }) })],
  controllers: [OrdersController],
  providers: [
    { provide: APP_INTERCEPTOR, useClass: GlobalAuditInterceptor },
    { provide: APP_FILTER, useClass: IdempotencyErrorFilter },
  ],
})
class OrdersModule {}

describe('adversary 17: a RetryLaterError thrown after the value by a global interceptor is stored', () => {
  let fixture: PoolApp;

  beforeAll(async () => {
    fixture = await startPoolApp('adv17_retry_later_after_value', {
      module: OrdersModule,
      usePool: (started) => (pool = started),
      setup: async (admin) => {
        await admin.query('CREATE TABLE orders (id serial PRIMARY KEY, item text NOT NULL)');
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

  it('the interceptor inside @Idempotent(): 503, then the retry places the order (control)', async () => {
    auditDown = true;
    const first = await send('/orders-audited-inside', 'gadget');
    auditDown = false;
    const retry = await send('/orders-audited-inside', 'gadget');
    expect({
      first: first.status,
      code: (first.body as { code?: string }).code,
      retry: retry.status,
      kept: await kept('gadget'),
    }).toEqual({ first: 503, code: 'retry_later', retry: 201, kept: 1 });
  }, 20_000);

  it('the global interceptor: the retry after the outage places the order', async () => {
    auditDown = true;
    const first = await send('/orders', 'widget');
    auditDown = false;
    const retry = await send('/orders', 'widget');
    // Observed: retry 503 retry_later, Idempotent-Replayed: true, no order (for ever).
    expect({
      first: first.status,
      code: (first.body as { code?: string }).code,
      retry: retry.status,
      replayed: retry.headers['idempotent-replayed'],
      kept: await kept('widget'),
    }).toEqual({ first: 503, code: 'retry_later', retry: 201, replayed: undefined, kept: 1 });
  }, 20_000);
});
