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
import {
  catchError,
  EMPTY,
  from,
  ignoreElements,
  merge,
  mergeMap,
  type Observable,
  switchMap,
  tap,
  throwError,
} from 'rxjs';
import { type Pool } from 'pg';
import request from 'supertest';
import { type AdapterName } from '../../support/bootstrap.js';
import { IdempotencyModule, Idempotent } from '../../../lib/index.js';
import { type PoolApp, startPoolApp } from '../../support/pool-app.js';

/**
 * Adversary, round 39a: an audit "on the side" MERGED into the returned stream (so that the
 * request's lifetime bounds it) shares the end of the rxjs chain with the request's own run.
 * While an error reporter inside it awaits its tracker before rethrowing, that end is still
 * open, so the audit's late subscription "runs into a subscriber of the failed run's chain
 * still open" and is taken for the app's retry: the handler runs a second time.
 *
 * The app: a global `APP_INTERCEPTOR` audit that opens its audit entry (an async call, 100 ms)
 * and then watches the request's result, merged with the result itself
 * (`merge(result$, from(open()).pipe(switchMap(() => result$), tap(record), ignoreElements(),
 * catchError(() => EMPTY)))`), and a second global interceptor, registered after it (so inside
 * it), that reports every error to a tracker (awaited, 300 ms) and rethrows it unchanged (the
 * idiom of round 38a). No retry anywhere. `POST /payments` (`@Idempotent()`) inserts a payment
 * row, asks the provider; the provider declines the first attempt (402, final, stored) and
 * would approve a second.
 *
 * What happens: run 1's handler throws the 402; lib/http/run-owned.ts:415 hands it on
 * (`RequestRun.handOn`, lib/http/earlier-run.ts:73-77, `chainOf` read first). The reporter's
 * `catchError` takes it and subscribes its tracker Promise to the subscriber after it, so
 * `merge`'s inner subscriber and the subscriber after `merge` stay open for 300 ms. At 100 ms the
 * audit subscribes `result$` again: its chain (switchMap, ignoreElements, catchError, merge's
 * second inner subscriber) ends in the same subscriber after `merge`, open, and in run 1's
 * error chain, so `resubscribedFrom` (lib/http/end-of-chain.ts:42-47) says "retry";
 * lib/idempotency.interceptor.ts:224-229 (`retryOf`) takes run 1 as the run it retries, run 1's
 * `stepAside` (lib/http/run-owned.ts:293-307) gives the key back, and run 2 claims it and runs
 * the handler again: the provider approves (a charge), for nobody (ignoreElements), and the
 * client is told the 402 the reporter then rethrows; the payment row commits with it (seen:
 * calls 2, charges 1, rows 1, the retry replays 402, on Express and Fastify).
 *
 * Expected: a subscription made by an operator that did NOT take the error (merge's second
 * input, subscribed by switchMap after the audit entry opened) is not the app's retry; it is
 * told run 1's error; the handler runs once; no charge; the retry replays 402.
 *
 * Control: the same app, the reporter not awaiting its tracker (the error reaches `merge` at
 * once, which unsubscribes the audit before it subscribes): handler once, 402 replayed.
 *
 * Severity: critical (the provider charged for a request answered "declined", whose retries
 * replay "declined").
 */
let pool: Pool;
let awaitTracker = true;
let calls = 0;
let charges = 0;
let declines = 1;
const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

/** Audits every request: opens its entry, then records what the request came to. */
@Injectable()
class AuditInterceptor implements NestInterceptor {
  private readonly logger = new Logger('audit');
  intercept(_context: ExecutionContext, next: CallHandler): Observable<unknown> {
    const result$ = next.handle();
    const audit$ = from(sleep(100)).pipe(
      switchMap(() => result$),
      tap((value) => this.logger.debug(`answered ${JSON.stringify(value)}`)),
      ignoreElements(),
      catchError(() => EMPTY),
    );
    return merge(result$, audit$);
  }
}

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
    { provide: APP_INTERCEPTOR, useClass: AuditInterceptor },
    { provide: APP_INTERCEPTOR, useClass: ReportingInterceptor },
  ],
})
class PaymentsModule {}

describe.each<AdapterName>(['express', 'fastify'])(
  'adversary 39a (%s): an audit merged into the result, while an inner reporter awaits',
  (adapter) => {
    let fixture: PoolApp;

    beforeAll(async () => {
      fixture = await startPoolApp(`adv39a_merged_audit_${adapter}`, {
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

    it('control: the reporter does not await its tracker', async () => {
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

    it('the reporter awaits its tracker: the merged audit does not run the handler again', async () => {
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
