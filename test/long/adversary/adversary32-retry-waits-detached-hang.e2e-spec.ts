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
import { APP_INTERCEPTOR } from '@nestjs/core';
import { catchError, type Observable, retry, throwError, timeout, TimeoutError } from 'rxjs';
import { type Pool } from 'pg';
import request from 'supertest';
import { type AdapterName } from '../../support/bootstrap.js';
import { IdempotencyModule, Idempotent } from '../../../lib/index.js';
import { type PoolApp, startPoolApp } from '../../support/pool-app.js';

/**
 * Adversary, round 32: an app's retry outside `@Idempotent()` waits, unbounded, for a handler
 * that a timeout inside `@Idempotent()` gave up on.
 *
 * The app: a timeout interceptor on the route, written above `@Idempotent()` (inside it):
 * `next.handle().pipe(timeout(300), catchError(TimeoutError -> RequestTimeoutException))`, and
 * a global interceptor (outside it) that retries a failed request once (rxjs docs:
 * `next.handle().pipe(retry(1))`). The handler writes its row, then waits for a provider that
 * hangs (here 6 s).
 *
 * What happens: run 1 owns the key; at 300 ms the inner timeout fails it while the handler's
 * Promise goes on: lib/http/run-owned.ts:334-342 detaches it (`detached = true`, the
 * TimeoutError passed on, `shared?.resolve` with nobody listening yet). The outer retry
 * subscribes again at once: run 2 waits for run 1's claim (decided), finds no `stepAside`
 * (detached, run-owned.ts:262) and asks `run.outcome` (lib/idempotency.interceptor.ts:231):
 * `detachedSettled` is not set yet (it is only once the handler settles, :339-341), so a new
 * `shared` promise is made (run-owned.ts:278-283), resolved `claimAgain` only once the detached
 * handler settled and its answer was stored (:111-114). Run 2 never reaches the inner timeout
 * (it waits before `next.handle()`), so nothing bounds its wait: the request answers when the
 * provider does (6 s here; never, if it never does), the key held all that time.
 *
 * Expected: the request answers within the app's own bounds (its timeout: the 408, or the
 * library's 409 `key_in_progress` that any other retry of the key gets while the detached
 * handler runs, run-owned.ts:326-329), within seconds; the handler's effects once.
 *
 * Control: the same route without `@Idempotent()` (the same interceptors): the retry runs
 * the chain again, which times out again: 408 in about 600 ms.
 *
 * Severity: medium (a hung request, as long as the handler's slowest call; an app's
 * inner timeout is there precisely to bound it).
 */
let pool: Pool;
const handlerMs = 6_000;

@Injectable()
class RetryOnceInterceptor implements NestInterceptor {
  intercept(_context: ExecutionContext, next: CallHandler): Observable<unknown> {
    return next.handle().pipe(retry(1));
  }
}

@Injectable()
class TimeoutInterceptor implements NestInterceptor {
  intercept(_context: ExecutionContext, next: CallHandler): Observable<unknown> {
    return next.handle().pipe(
      timeout(300),
      catchError((error: unknown) =>
        throwError(() =>
          error instanceof TimeoutError ? new RequestTimeoutException('provider too slow') : error,
        ),
      ),
    );
  }
}

@Controller()
class PaymentsController {
  @Post('payments')
  @UseInterceptors(TimeoutInterceptor)
  @Idempotent()
  async pay(@Body() body: { ref: string }) {
    await pool.query('INSERT INTO payments (ref) VALUES ($1)', [body.ref]);
    await new Promise((resolve) => setTimeout(resolve, handlerMs));
    return { ref: body.ref, status: 'captured' };
  }

  @Post('plain')
  @UseInterceptors(TimeoutInterceptor)
  async plain(@Body() body: { ref: string }) {
    await pool.query('INSERT INTO payments (ref) VALUES ($1)', [body.ref]);
    await new Promise((resolve) => setTimeout(resolve, handlerMs));
    return { ref: body.ref, status: 'captured' };
  }
}

@Module({
  imports: [IdempotencyModule.forRootAsync({ useFactory: () => ({ globalKeys: true, pool }) })],
  controllers: [PaymentsController],
  providers: [{ provide: APP_INTERCEPTOR, useClass: RetryOnceInterceptor }],
})
class PaymentsModule {}

describe.each<AdapterName>(['express', 'fastify'])(
  'adversary 32 (%s): an outer retry waits without bound for a handler an inner timeout gave up on',
  (adapter) => {
    let fixture: PoolApp;

    beforeAll(async () => {
      fixture = await startPoolApp(`adv32_retry_hang_${adapter}`, {
        module: PaymentsModule,
        max: 4,
        adapter,
        usePool: (started) => (pool = started),
        setup: async (admin) => {
          await admin.query('CREATE TABLE payments (id serial PRIMARY KEY, ref text NOT NULL)');
        },
      });
    }, 60_000);

    afterAll(async () => {
      await new Promise((resolve) => setTimeout(resolve, handlerMs + 500));
      await fixture?.close();
    }, 30_000);

    const pay = (ref: string, idempotent: boolean) =>
      request(fixture.app.getHttpServer())
        .post(idempotent ? '/payments' : '/plain')
        .set('Idempotency-Key', ref)
        .send({ ref })
        .timeout(10_000);

    it.each([
      ['control: the route without @Idempotent()', false],
      ['@Idempotent(): the retry waits for the detached handler', true],
    ] as const)(
      '%s: answered within 2 s',
      async (name, idempotent) => {
        const ref = `adv32-rh-${adapter}-${idempotent}`;
        const began = Date.now();
        const first = await pay(ref, idempotent);
        const tookMs = Date.now() - began;
        if (process.env.ADV_DEBUG) console.log(name, first.status, first.body, tookMs);
        // Received with @Idempotent(): 201 (replayed) after about 6 s; the control 408 in 0.6 s.
        expect({ answeredWithin2s: tookMs < 2_000 }).toEqual({ answeredWithin2s: true });
      },
      20_000,
    );
  },
);
