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
import { catchError, map, type Observable, throwError, timeout, TimeoutError, timer } from 'rxjs';
import request from 'supertest';
import { IdempotencyModule, Idempotent } from '../../../lib/index.js';
import { type PoolApp, startPoolApp } from '../../support/pool-app.js';

/**
 * Adversary, round 19: an inner timeout over an async handler that resolves to an Observable
 * (a write, then an `HttpService` call returned as it is): the Observable object itself is
 * rendered and stored as the key's 201 answer for ever, its write committed.
 *
 * What the app does (the pool seam, Express): Nest's timeout interceptor (`timeout(400)`,
 * `TimeoutError` mapped to `RequestTimeoutException`) written above `@Idempotent()` (inside
 * it), as transactions.md's failure table allows. The handler is `async`: it records the quote
 * request, then returns the pricing service's call as an Observable (the `HttpService` idiom,
 * `this.http.post(...).pipe(map((r) => r.data))`; Nest awaits the Promise and subscribes to
 * the Observable it resolved to; here the call is a `timer(800)`, slow this time). The client
 * gets 408 and retries with the same key once the work would be over.
 *
 * What happens: on the timeout run-owned.ts asks `handlerOutcome(context.handlerReturned)`:
 * the handler returned a Promise (not an Observable), so it is taken for a handler going on;
 * the Promise resolves at once to the Observable, which is taken for the handler's value and
 * rendered by `settleDetached` (`renderResult`): the quote row is committed and the JSON of an
 * rxjs Observable object (`{"source":…,"operator":…}`) is stored as the key's 201 answer. The
 * pricing call itself was cancelled by the timeout. Every retry replays that 201 for ever.
 *
 * What should happen: transactions.md's failure table, "a timeout inside `@Idempotent()`": "a
 * handler whose Promise goes on: as under an outer timeout, its effects commit with its own
 * answer when it settles; an Observable handler (cancelled by the timeout) ...: rolled back, its
 * key given back"; "runs it again" / "replays its answer". Its own answer is the priced quote,
 * never the Observable object: the retry gets either that quote or (given back, run again) the
 * timeout again; the test accepts both. The control, the same interceptor written under
 * `@Idempotent()` (an outer timeout), gives the retry the priced quote.
 *
 * Why it matters: a 201 with a meaningless body, stored for ever, the real work (the pricing)
 * never done: a silent corruption of the key's answer. Low to medium: async handlers returning
 * HttpService Observables after a database write are common in Nest code; a per-route timeout
 * inside `@Idempotent()` is the documented shape.
 */
let pool: Pool;
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

/** The pricing service's answer, as `HttpService` gives it: an Observable, slow this time. */
function priceOf(item: string): Observable<{ item: string; price: number }> {
  return timer(800).pipe(
    map(() => {
      return { item, price: 42 };
    }),
  );
}

@Controller()
class QuotesController {
  private async quote(item: string) {
    await pool.query('INSERT INTO quote_requests (item) VALUES ($1)', [item]);
    return priceOf(item);
  }

  @Post('inner')
  @UseInterceptors(TimeoutInterceptor)
  @Idempotent()
  inner(@Body() body: { item: string }) {
    return this.quote(body.item);
  }

  @Post('outer')
  @Idempotent()
  @UseInterceptors(TimeoutInterceptor)
  outer(@Body() body: { item: string }) {
    return this.quote(body.item);
  }

  @Post('plain')
  plain(@Body() body: { item: string }) {
    return this.quote(body.item);
  }
}

@Module({
  imports: [IdempotencyModule.forRootAsync({ useFactory: () => ({ globalKeys: true, pool }) })],
  controllers: [QuotesController],
})
class QuotesModule {}

describe('adversary 19: inner timeout, an async handler resolving to an Observable', () => {
  let fixture: PoolApp;

  beforeAll(async () => {
    fixture = await startPoolApp('adv19_inner_timeout_observable', {
      module: QuotesModule,
      max: 4,
      usePool: (started) => {
        pool = started;
      },
      setup: async (admin) => {
        await admin.query('CREATE TABLE quote_requests (item text NOT NULL)');
      },
    });
  }, 60_000);

  afterAll(async () => {
    await fixture?.close();
  });

  const send = (path: string, item: string, key?: string) => {
    const call = request(fixture.app.getHttpServer()).post(path).timeout(10_000);
    return (key ? call.set('Idempotency-Key', key) : call).send({ item });
  };

  it('without the library, no timeout in the way: the priced quote (what the handler answers)', async () => {
    // The pricing call is slower than the timeout; here nothing times out.
    const answer = await send('/plain', 'plain');
    expect({ status: answer.status, body: answer.body as unknown }).toEqual({
      status: 201,
      body: { item: 'plain', price: 42 },
    });
  }, 20_000);

  it.each([
    ['outer', 'written under @Idempotent() (outside it): control'],
    ['inner', 'written above @Idempotent() (inside it)'],
  ])(
    '%s timeout, %s: 408 first; the retry never gets a made-up 201',
    async (path) => {
      const first = await send(`/${path}`, path, `quote-${path}`);
      await sleep(1_500); // whatever goes on is over
      const retry = await send(`/${path}`, path, `quote-${path}`);
      // Observed for inner: retry 201 with the JSON of an rxjs Observable (its `source`,
      // `operator`), stored for ever.
      expect(first.status).toBe(408);
      // Either the work went on and its own answer is replayed (as the outer control does), or
      // it was given back and the retry ran it again (timing out again): never another body.
      const seen = retry.status === 408 ? '408' : `${retry.status} ${retry.text}`;
      expect([`201 {"item":"${path}","price":42}`, '408']).toContain(seen);
    },
    20_000,
  );
});
