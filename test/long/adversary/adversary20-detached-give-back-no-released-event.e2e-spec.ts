import {
  type CallHandler,
  Controller,
  type ExecutionContext,
  Injectable,
  Module,
  type NestInterceptor,
  Param,
  Post,
  RequestTimeoutException,
  UseInterceptors,
} from '@nestjs/common';
import { subscribe, unsubscribe } from 'node:diagnostics_channel';
import { type Pool } from 'pg';
import {
  catchError,
  defer,
  map,
  type Observable,
  switchMap,
  throwError,
  timeout,
  TimeoutError,
  timer,
} from 'rxjs';
import request from 'supertest';
import { IDEMPOTENCY_CHANNELS, IdempotencyModule, Idempotent } from '../../../lib/index.js';
import { type PoolApp, startPoolApp } from '../../support/pool-app.js';

/**
 * Adversary, round 20: a key given back by `settleDetached` (a handler that went on after a
 * timeout and then has no answer to store) publishes no `released` event: the request counts
 * `claimed` and then nothing, where events-and-metrics.md says "A new key counts `claimed` and
 * then `stored` or `released`".
 *
 * What the app does (Express, pool): Nest's documented timeout interceptor written above
 * `@Idempotent()` (inside it) on two routes doing the same work, a write then the payment
 * provider's call as an Observable (what `HttpService` returns), slow (800 ms) this time:
 * `POST /async/:id` is an `async` handler that resolves to that Observable; `POST /plain/:id`
 * returns one Observable (`defer` the write, `switchMap` to the call). An operator subscribes
 * to `IDEMPOTENCY_CHANNELS.released` (a dashboard of keys given back, the
 * `idempotency.outcomes{outcome="released"}` counter).
 *
 * What happens: both are rolled back and their keys given back (the retry runs them again),
 * as transactions.md's failure table says. The plain Observable is given back by
 * `onHandlerError` through `rollBackAndRelease` (lib/transaction/owner-tools.ts:56-65),
 * which publishes `released` (reason `timeout`). The async one goes through run-owned.ts:270-277
 * to `settleDetached` with `handlerOutcome`'s CANCELLED error, and settle-detached.ts:38-41
 * rolls back and releases by hand, without the event (as its catch at 60-63 does, and as
 * any detached handler that fails does: an outer timeout then a thrown error).
 *
 * What should happen: events-and-metrics.md: `idempotency:released`, "given back, nothing
 * stored", and "A new key counts `claimed` and then `stored` or `released`". The round's
 * refactor (3d59017) made `rollBackAndRelease` the one path for "roll back, give back,
 * publish released" but left these two hand-written copies without their third step.
 *
 * Why it matters: metrics and alerting built on the documented events under-count give-backs
 * on exactly the timeout paths (a claimed key that is neither stored nor released looks like
 * a stuck or crashed worker). Severity: low (observability only; the key itself is fine).
 */
let pool: Pool;
const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

/** The payment provider, as `HttpService` returns it: slow this time. */
const provider = (): Observable<string> => timer(800).pipe(map(() => 'paid'));

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
class PaymentsController {
  @Post('plain/:id')
  @UseInterceptors(TimeoutInterceptor)
  @Idempotent()
  plain(@Param('id') id: string): Observable<{ id: string; receipt: string }> {
    return defer(() => pool.query('INSERT INTO payments (id) VALUES ($1)', [id])).pipe(
      switchMap(() => provider()),
      map((receipt) => ({ id, receipt })),
    );
  }

  @Post('async/:id')
  @UseInterceptors(TimeoutInterceptor)
  @Idempotent()
  async viaAsync(@Param('id') id: string): Promise<Observable<{ id: string; receipt: string }>> {
    await pool.query('INSERT INTO payments (id) VALUES ($1)', [id]);
    return provider().pipe(map((receipt) => ({ id, receipt })));
  }
}

@Module({
  imports: [IdempotencyModule.forRootAsync({ useFactory: () => ({ globalKeys: true, pool }) })],
  controllers: [PaymentsController],
  providers: [TimeoutInterceptor],
})
class PaymentsModule {}

describe('adversary 20: a key given back after a detached settle publishes no released event', () => {
  let fixture: PoolApp;

  beforeAll(async () => {
    fixture = await startPoolApp('adv20_detached_no_released', {
      module: PaymentsModule,
      max: 4,
      usePool: (started) => {
        pool = started;
      },
      setup: async (admin) => {
        await admin.query('CREATE TABLE payments (id text PRIMARY KEY)');
      },
    });
  }, 60_000);

  afterAll(async () => {
    await fixture?.close();
  });

  it.each([
    ['plain', 'a plain Observable handler: control'],
    ['async', 'an async handler resolving to an Observable'],
  ])(
    '%s (%s): given back, with a released event',
    async (route) => {
      const events: { key: string; channel: string }[] = [];
      const on = (channel: string) => (message: unknown) =>
        events.push({ key: (message as { key: string }).key, channel });
      const claimed = on('claimed');
      const released = on('released');
      const stored = on('stored');
      subscribe(IDEMPOTENCY_CHANNELS.claimed, claimed);
      subscribe(IDEMPOTENCY_CHANNELS.released, released);
      subscribe(IDEMPOTENCY_CHANNELS.stored, stored);
      try {
        const key = `pay-${route}`;
        const first = await request(fixture.app.getHttpServer())
          .post(`/${route}/${route}`)
          .set('Idempotency-Key', key)
          .timeout(10_000);
        await sleep(1_200); // settled: given back
        const rows = await fixture.admin.query('SELECT 1 FROM payments WHERE id = $1', [route]);
        // Observed for async: events [claimed] only (given back, rows 0, no released).
        expect({
          first: first.status,
          rows: rows.rowCount,
          events: events.filter((event) => event.key === key).map((event) => event.channel),
        }).toEqual({ first: 408, rows: 0, events: ['claimed', 'released'] });
      } finally {
        unsubscribe(IDEMPOTENCY_CHANNELS.claimed, claimed);
        unsubscribe(IDEMPOTENCY_CHANNELS.released, released);
        unsubscribe(IDEMPOTENCY_CHANNELS.stored, stored);
      }
    },
    20_000,
  );
});
