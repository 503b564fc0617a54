import {
  Body,
  type CallHandler,
  Controller,
  type ExecutionContext,
  Get,
  Injectable,
  Logger,
  Module,
  type NestInterceptor,
  Post,
} from '@nestjs/common';
import { APP_INTERCEPTOR } from '@nestjs/core';
import { catchError, type Observable, throwError, timeout, TimeoutError } from 'rxjs';
import { type Pool } from 'pg';
import request from 'supertest';
import { IdempotencyModule, Idempotent } from '../../../lib/index.js';
import { type PoolApp, startPoolApp } from '../../support/pool-app.js';

/**
 * Adversary, round 31: a run of the request that is unsubscribed while it waits for an
 * earlier run's claim never marks its own claim decided, and every run after it waits for
 * ever.
 *
 * The app (two global interceptors outside `@Idempotent()`, in this order):
 *  - a timeout fallback: `next.handle().pipe(timeout(150), catchError((e) => e instanceof
 *    TimeoutError ? next.handle() : throwError(() => e)))`;
 *  - an audit "on the side": `const r$ = next.handle(); r$.subscribe(log); return r$;`.
 * The pool has one connection, and a report (`GET /report`, 400 ms, not idempotent) holds it
 * when the payment comes in.
 *
 * What happens: run 0 (the audit's side subscription) claims; its claim waits for the
 * connection. Run 1 (the returned one) waits for run 0's claim
 * (lib/idempotency.interceptor.ts:207, `from(earlier.claimed)`). At 150 ms the timeout
 * unsubscribes run 1 there: `run.claimDecided()` is called only in `claimAndRun`'s
 * tap/finalize (interceptor.ts:188-189) and on joining (:217), so run 1's `claimed` never
 * settles. The fallback runs the chain again: run 2 (side) finds run 1 as its earlier run
 * (lib/http/earlier-run.ts:46-49, the latest on the response) and waits on its `claimed`;
 * run 3 (returned) waits on run 2's. Neither ever goes on: the request is never answered.
 * Meanwhile run 0 claims once the report is done and runs the handler; its value goes to the
 * audit only, so no answer is ever written for it to commit: its transaction stays open with
 * the payment uncommitted (holding the pool's one connection), and its heartbeat renews the
 * key's lease while it waits (run-owned.ts:288-291, `settle(emitted)`), so the key stays
 * `started`; with the pool's one connection kept, the retry (past the lease) hangs too, and so
 * would any other route's query.
 *
 * Expected: run 2 meets run 0 (or claims once run 1 is gone) and the request is answered 201
 * within seconds, with one payment; its retry replays 201.
 *
 * Control: the same with no report holding the pool (run 0's claim lands before the timeout):
 * 201, one payment, replayed.
 *
 * Severity: high (a request that hangs for ever, its key held and its transaction open, the
 * pool's connection taken).
 */
let pool: Pool;

@Injectable()
class TimeoutFallbackInterceptor implements NestInterceptor {
  intercept(context: ExecutionContext, next: CallHandler): Observable<unknown> {
    if (context.switchToHttp().getRequest<{ method: string }>().method === 'GET') {
      return next.handle();
    }
    return next.handle().pipe(
      timeout(150),
      catchError((error: unknown) =>
        error instanceof TimeoutError ? next.handle() : throwError(() => error),
      ),
    );
  }
}

@Injectable()
class AuditInterceptor implements NestInterceptor {
  private readonly logger = new Logger('audit');
  intercept(_context: ExecutionContext, next: CallHandler): Observable<unknown> {
    const result$ = next.handle();
    result$.subscribe({
      next: (value) => this.logger.debug(`answered ${JSON.stringify(value)}`),
      error: (error: unknown) => this.logger.debug(`failed ${String(error)}`),
    });
    return result$;
  }
}

@Controller()
class PaymentsController {
  @Get('report')
  async report() {
    await pool.query('SELECT pg_sleep(0.4)');
    return { ok: true };
  }

  @Post('payments')
  @Idempotent()
  async pay(@Body() body: { ref: string }) {
    await pool.query('INSERT INTO payments (ref) VALUES ($1)', [body.ref]);
    return { ref: body.ref, status: 'captured' };
  }
}

@Module({
  imports: [IdempotencyModule.forRootAsync({ useFactory: () => ({ globalKeys: true, pool }) })],
  controllers: [PaymentsController],
  providers: [
    { provide: APP_INTERCEPTOR, useClass: TimeoutFallbackInterceptor },
    { provide: APP_INTERCEPTOR, useClass: AuditInterceptor },
  ],
})
class PaymentsModule {}

describe('adversary 31: a run unsubscribed while it waits for an earlier run hangs the request', () => {
  let fixture: PoolApp;

  beforeAll(async () => {
    fixture = await startPoolApp('adv31_waiting_run_hangs', {
      module: PaymentsModule,
      max: 1,
      usePool: (started) => (pool = started),
      setup: async (admin) => {
        await admin.query('CREATE TABLE payments (id serial PRIMARY KEY, ref text NOT NULL)');
      },
    });
    await request(fixture.app.getHttpServer()).get('/report');
  }, 60_000);

  afterAll(async () => {
    // The hung run keeps its transaction (and the pool's connection) for ever: the app and the
    // pool are given a few seconds to close, then the database is dropped under them.
    await Promise.race([
      fixture?.app.close(),
      new Promise((resolve) => setTimeout(resolve, 3_000).unref()),
    ]);
    await fixture?.admin.end().catch(() => undefined);
    await fixture?.database.drop();
  }, 30_000);

  const pay = (ref: string) =>
    request(fixture.app.getHttpServer())
      .post('/payments')
      .set('Idempotency-Key', ref)
      .send({ ref })
      .timeout(4_000)
      .then(
        (response) => ({ status: response.status, body: response.body as unknown }),
        (error: Error) => ({ status: 0, body: error.message as unknown }),
      );

  it.each([
    ['control: no report holds the pool', false],
    ['a report holds the pool: the returned run times out while it waits', true],
  ] as const)(
    '%s: 201 within seconds, one payment, its key done',
    async (name, busy) => {
      const ref = `adv31-hang-${busy}`;
      const report = busy
        ? request(fixture.app.getHttpServer())
            .get('/report')
            .timeout(4_000)
            .then((r) => r.status)
        : Promise.resolve(200);
      if (busy) await new Promise((resolve) => setTimeout(resolve, 30));
      const first = await pay(ref);
      const key = (
        await fixture.admin.query(
          'SELECT state, response_code, locked_until > now() AS leased FROM idempotency_keys WHERE key = $1',
          [ref],
        )
      ).rows[0] as unknown;
      const payments = Number(
        (await fixture.admin.query('SELECT count(*) FROM payments WHERE ref = $1', [ref])).rows[0]
          .count,
      );
      // Past the 5 s lease of the claim (made at about 0.4 s): a retry of the key.
      await new Promise((resolve) => setTimeout(resolve, 2_000));
      const retry = await pay(ref);
      if (process.env.ADV_DEBUG) {
        console.log(name, first, key, payments, retry, await report.catch(String));
      }
      // Received with the busy pool: first { status: 0, body: 'Timeout of 4000ms exceeded' },
      // the key { state: 'started', response_code: null, leased: true }, no payment committed,
      // and the retry, past the lease, hangs as well (status 0): its claim waits for the pool's
      // one connection, which run 0's open transaction keeps.
      expect({ first, key, payments, retry: retry.status }).toEqual({
        first: { status: 201, body: { ref, status: 'captured' } },
        key: { state: 'done', response_code: 201, leased: null },
        payments: 1,
        retry: 201,
      });
    },
    20_000,
  );
});
