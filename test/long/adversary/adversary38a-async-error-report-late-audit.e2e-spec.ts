import {
  Body,
  type CallHandler,
  Controller,
  type ExecutionContext,
  HttpException,
  Injectable,
  Logger,
  Module,
  type NestInterceptor,
  Post,
} from '@nestjs/common';
import { APP_INTERCEPTOR } from '@nestjs/core';
import { catchError, from, mergeMap, type Observable, throwError } from 'rxjs';
import { type Pool } from 'pg';
import request from 'supertest';
import { type AdapterName } from '../../support/bootstrap.js';
import { IdempotencyModule, Idempotent } from '../../../lib/index.js';
import { type PoolApp, startPoolApp } from '../../support/pool-app.js';

/**
 * Adversary, round 38a: an error-reporting interceptor that awaits its tracker before it hands
 * the error on (`catchError(e => from(report(e)).pipe(mergeMap(() => throwError(() => e))))`)
 * keeps the end of the rxjs chain open while it awaits, though it never subscribes again. The
 * library reads that open end as "the app's retry took the error" (`errorHeld`), so a side audit
 * that subscribes late (round 33's idiom) in that window is taken for the app's retry: the
 * handler runs a second time, for nobody, and its work commits with the first run's error.
 *
 * The app: two global `APP_INTERCEPTOR`s. A reporter that sends every error to an error tracker
 * (awaited, 300 ms) and then rethrows it unchanged (no retry anywhere), and an audit "on the
 * side" that watches once its audit entry is opened (`const r$ = next.handle();
 * audit.open().then(() => r$.subscribe(record)); return r$;`, 100 ms). Nest's own exception
 * filter. `POST /payments` (`@Idempotent()`) inserts a payment row, then asks the provider; the
 * provider declines the first attempt (402, a final answer, stored), would approve a second.
 *
 * What happens: run 1's handler throws the 402; lib/http/run-owned.ts:415 hands it on through
 * `RequestRun.handOn` (lib/http/earlier-run.ts:58-65). The reporter's `catchError` takes it and
 * subscribes its own inner Observable (the tracker's Promise) to the subscriber after it: the
 * end of the chain (`endOfChain`, lib/http/end-of-chain.ts) is still open when `subscriber.error`
 * returns, so `errorHeld` is set, `errorEscaped` is not. At 100 ms the audit subscribes: run 2
 * takes run 1 as the run it retries (lib/idempotency.interceptor.ts:220, `retryOf`), run 1's
 * `stepAside` (run-owned.ts:293-307) rolls back and gives the key back, and run 2 claims it
 * and runs the handler again: the provider approves, a payment row is inserted and committed
 * with the 402 the reporter then hands on to Nest (the answer written on the shared response).
 * The client was told "declined", the card was charged, its retry replays "declined".
 *
 * Expected: an operator that takes the error and never subscribes again (an awaited report,
 * `catchError(() => timer(..))`, any async step before a rethrow) is not a retry: the audit's
 * late run is told the same error; the handler runs once, nothing charged, no row; the retry
 * replays 402.
 *
 * Control: the same app, its reporter reporting without awaiting (`catchError(e => { report(e);
 * return throwError(() => e); })`): the error reaches Nest at once, the end closes, the audit is
 * told the error.
 *
 * Severity: critical (a charge made and committed for a request answered "declined").
 */
let pool: Pool;
let awaitTracker = true;
let calls = 0;
let charges = 0;
let declines = 1;
const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

/** Reports every error to an error tracker, then rethrows it as it was. */
@Injectable()
class ReportingInterceptor implements NestInterceptor {
  private readonly logger = new Logger('tracker');
  private async report(error: unknown) {
    await sleep(300);
    this.logger.debug(`reported ${String(error)}`);
  }
  intercept(_context: ExecutionContext, next: CallHandler): Observable<unknown> {
    return next.handle().pipe(
      catchError((error: unknown) => {
        if (!awaitTracker) {
          void this.report(error);
          return throwError(() => error);
        }
        return from(this.report(error)).pipe(mergeMap(() => throwError(() => error)));
      }),
    );
  }
}

/** Audits on the side: opens its audit entry first (a call of its own), then watches. */
@Injectable()
class AuditInterceptor implements NestInterceptor {
  private readonly logger = new Logger('audit');
  intercept(_context: ExecutionContext, next: CallHandler): Observable<unknown> {
    const result$ = next.handle();
    void sleep(100).then(() =>
      result$.subscribe({
        next: (value) => this.logger.debug(`answered ${JSON.stringify(value)}`),
        error: (error: unknown) => this.logger.debug(`failed ${String(error)}`),
      }),
    );
    return result$;
  }
}

@Controller()
class PaymentsController {
  @Post('payments')
  @Idempotent()
  async pay(@Body() body: { ref: string }) {
    calls += 1;
    const { rows } = await pool.query<{ id: number }>(
      'INSERT INTO payments (ref) VALUES ($1) RETURNING id',
      [body.ref],
    );
    if (declines > 0) {
      declines -= 1;
      throw new HttpException({ code: 'card_declined' }, 402);
    }
    charges += 1;
    return { ref: body.ref, id: rows[0].id };
  }
}

@Module({
  imports: [IdempotencyModule.forRootAsync({ useFactory: () => ({ globalKeys: true, pool }) })],
  controllers: [PaymentsController],
  providers: [
    { provide: APP_INTERCEPTOR, useClass: ReportingInterceptor },
    { provide: APP_INTERCEPTOR, useClass: AuditInterceptor },
  ],
})
class PaymentsModule {}

describe.each<AdapterName>(['express', 'fastify'])(
  'adversary 38a (%s): a late side audit while an interceptor awaits its error report',
  (adapter) => {
    let fixture: PoolApp;

    beforeAll(async () => {
      fixture = await startPoolApp(`adv38a_async_report_${adapter}`, {
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
      await fixture?.admin.query(
        `SELECT pg_terminate_backend(pid) FROM pg_stat_activity
          WHERE datname = current_database() AND pid <> pg_backend_pid()`,
      );
      await fixture?.close();
    });

    const check = async (ref: string) => {
      const post = () =>
        request(fixture.app.getHttpServer())
          .post('/payments')
          .set('Idempotency-Key', ref)
          .send({ ref })
          .timeout(5000);
      calls = 0;
      charges = 0;
      declines = 1;
      const first = await post();
      await sleep(400);
      const rows = Number(
        (
          await fixture.admin.query<{ n: string }>(
            'SELECT count(*) AS n FROM payments WHERE ref = $1',
            [ref],
          )
        ).rows[0].n,
      );
      const again = await post();
      return {
        first: { status: first.status, code: (first.body as { code?: string }).code },
        calls,
        charges,
        rows,
        again: { status: again.status, code: (again.body as { code?: string }).code },
      };
    };

    it('control: the reporter does not await its tracker (the error reaches Nest at once)', async () => {
      awaitTracker = false;
      const seen = await check(`quick-${adapter}`);
      expect(seen).toEqual({
        first: { status: 402, code: 'card_declined' },
        calls: 1,
        charges: 0,
        rows: 0,
        again: { status: 402, code: 'card_declined' },
      });
    });

    it('the reporter awaits its tracker: the audit does not run the handler again', async () => {
      awaitTracker = true;
      const seen = await check(`slow-${adapter}`);
      expect(seen).toEqual({
        first: { status: 402, code: 'card_declined' },
        calls: 1,
        charges: 0,
        rows: 0,
        again: { status: 402, code: 'card_declined' },
      });
    });
  },
);
