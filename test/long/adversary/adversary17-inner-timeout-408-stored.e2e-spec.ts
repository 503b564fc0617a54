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
  UseInterceptors,
} from '@nestjs/common';
import { type Pool } from 'pg';
import { catchError, type Observable, throwError, timeout, TimeoutError } from 'rxjs';
import request from 'supertest';
import { IdempotencyModule, Idempotent } from '../../../lib/index.js';
import { type PoolApp, startPoolApp } from '../../support/pool-app.js';

/**
 * What the app does (the pool seam, Express, defaults otherwise): the timeout interceptor of
 * Nest's own docs (`timeout(400)`, `TimeoutError` mapped to `RequestTimeoutException`), put on
 * one route with `@UseInterceptors(TimeoutInterceptor)` written above `@Idempotent()`, so it
 * runs inside the library's interceptor. The handler writes an order, calls a slow payment
 * provider (800 ms this time), writes the payment. The client gets 408, waits and retries
 * with the same key, as a 408 ("Request Timeout": the server would not wait; the client may
 * repeat the request, RFC 9110 §15.5.9) invites.
 *
 * What happens: the 408 reaches the library as the handler's own error (the handler has
 * started), so it is stored as the key's final answer, rolled back, while the handler still
 * runs (its second write is then refused). Every retry of that key, for ever, replays the
 * 408; the order can never be placed with that key.
 *
 * What should happen (transactions.md: an outer timeout's 408 is "not stored", and the retry
 * gets the handler's real answer; the promise: "a correct program never fails for ever because
 * of the library"): a timeout's 408 that the handler did not choose, written while the handler
 * still runs, is no answer to replay for ever: either the handler goes on detached and commits
 * its own answer (as for the outer timeout), or the key is given back and the retry runs it.
 * The control below, the same interceptor written under `@Idempotent()` (so outside it), does
 * that: 408 first, then the handler's answer replayed.
 *
 * Why it matters: the order of two decorators, which no doc mentions for timeouts, decides
 * whether a slow moment poisons a key for ever (the client must invent a new key, the very
 * thing idempotency keys exist to avoid). Medium: a per-route timeout interceptor is common,
 * and either order looks right.
 */
let pool: Pool;
let runs = 0;
const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

@Injectable()
class TimeoutInterceptor implements NestInterceptor {
  intercept(_context: ExecutionContext, next: CallHandler): Observable<unknown> {
    return next.handle().pipe(
      timeout(400),
      catchError((error: unknown) =>
        throwError(() => (error instanceof TimeoutError ? new RequestTimeoutException() : error)),
      ),
    );
  }
}

@Controller()
class OrdersController {
  private async place(item: string) {
    await pool.query('INSERT INTO orders (item, step) VALUES ($1, 1)', [item]);
    await sleep(800); // the payment provider, slow this time
    await pool.query('INSERT INTO orders (item, step) VALUES ($1, 2)', [item]);
    runs += 1;
    return { item };
  }

  @Post('inner')
  @UseInterceptors(TimeoutInterceptor)
  @Idempotent()
  inner(@Body() body: { item: string }) {
    return this.place(body.item);
  }

  @Post('outer')
  @Idempotent()
  @UseInterceptors(TimeoutInterceptor)
  outer(@Body() body: { item: string }) {
    return this.place(body.item);
  }
}

@Module({
  imports: [IdempotencyModule.forRootAsync({ useFactory: () => ({ globalKeys: true, pool }) })],
  controllers: [OrdersController],
})
class OrdersModule {}

describe('adversary 17: a timeout interceptor inside @Idempotent() stores its 408 for ever', () => {
  let fixture: PoolApp;

  beforeAll(async () => {
    fixture = await startPoolApp('adv17_inner_timeout', {
      module: OrdersModule,
      usePool: (started) => (pool = started),
      setup: async (admin) => {
        await admin.query(
          'CREATE TABLE orders (id serial PRIMARY KEY, item text NOT NULL, step int NOT NULL)',
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

  const steps = async (item: string) =>
    (
      await fixture.admin.query('SELECT step FROM orders WHERE item = $1 ORDER BY step', [item])
    ).rows.map((row: { step: number }) => row.step);

  it('the timeout outside @Idempotent(): 408, then the handler answer replayed (control)', async () => {
    runs = 0;
    const first = await send('/outer', 'gadget');
    await sleep(1500); // the handler has finished meanwhile
    const retry = await send('/outer', 'gadget');
    expect({
      first: first.status,
      retry: retry.status,
      body: retry.body as unknown,
      runs,
      steps: await steps('gadget'),
    }).toEqual({ first: 408, retry: 201, body: { item: 'gadget' }, runs: 1, steps: [1, 2] });
  }, 20_000);

  it('the timeout inside @Idempotent(): the retry after it is not a 408 for ever', async () => {
    runs = 0;
    const first = await send('/inner', 'widget');
    await sleep(1500);
    const retry = await send('/inner', 'widget');
    await sleep(1500);
    const again = await send('/inner', 'widget');
    // Observed: first 408, retry 408, again 408 (replayed), runs 0, steps [].
    expect({
      first: first.status,
      retry: retry.status,
      again: again.status,
      runs,
      steps: await steps('widget'),
    }).toEqual({ first: 408, retry: 201, again: 201, runs: 1, steps: [1, 2] });
  }, 20_000);
});
