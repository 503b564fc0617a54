import {
  Body,
  type CallHandler,
  Controller,
  type ExecutionContext,
  Injectable,
  Logger,
  Module,
  type NestInterceptor,
  Post,
  ServiceUnavailableException,
} from '@nestjs/common';
import { APP_INTERCEPTOR } from '@nestjs/core';
import { type Observable, retry, share, tap, throwError, timer } from 'rxjs';
import { type Pool } from 'pg';
import request from 'supertest';
import { type AdapterName } from '../../support/bootstrap.js';
import { IdempotencyModule, Idempotent } from '../../../lib/index.js';
import { type PoolApp, startPoolApp } from '../../support/pool-app.js';

/**
 * Adversary, round 38a: an audit interceptor that shares the handler's Observable (`share()`,
 * the audit and the answer fed by one run) inside an app's rxjs `retry()`: the retry is told the
 * first try's error and never runs the handler. The walk for "did the error stay in the app's
 * chain" stops at `share()`'s own connection subscriber, which the error closes, though the
 * `retry()` after the share's Subject took it.
 *
 * The app: two global `APP_INTERCEPTOR`s. The outer retries a 503 once, after 50 ms
 * (`next.handle().pipe(retry({ count: 1, delay }))`, the guide's own example,
 * docs/guides/transactions.md:195). The inner audits each run without running it twice:
 * `const run$ = next.handle().pipe(share()); run$.subscribe(audit); return run$;` (share is
 * how rxjs says "one execution, several observers"). `POST /payments` (`@Idempotent()`) inserts
 * a payment row, then asks the provider, whose first call fails 503 (a passing outage).
 *
 * What happens: the library's subscriber is subscribed by `share()`'s connection (a
 * SafeSubscriber feeding its Subject), whose `destination` is no linked subscriber: `endOfChain`
 * (lib/http/end-of-chain.ts:23-29) ends there. The 503 closes it, so `RequestRun.handOn`
 * (lib/http/earlier-run.ts:58-65) sets `errorEscaped`, though the Subject handed the error to
 * `retry()`, which subscribes again 50 ms later (share resets on error: a new run). That run
 * takes no `retryOf` (lib/idempotency.interceptor.ts:220) and run 1's `outcome`
 * (lib/http/run-owned.ts:310-313) tells it the 503: stored as the key's answer, replayed.
 *
 * Expected: as without the share: the retry runs the handler, 201, one row, replay 201.
 *
 * Control: the same app, the audit written with `tap()` in the returned chain (no share): 201.
 *
 * Severity: medium (no double effect; the app's retry silently defeated, a passing outage
 * stored as the payment's answer for ever).
 */
let pool: Pool;
let withShare = true;
let calls = 0;
let outages = 1;
const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));
const is503 = (error: unknown) =>
  error instanceof ServiceUnavailableException ||
  (error as { getStatus?: () => number })?.getStatus?.() === 503;

/** Retries a passing outage (503) once, after a back-off. */
@Injectable()
class RetryInterceptor implements NestInterceptor {
  intercept(_context: ExecutionContext, next: CallHandler): Observable<unknown> {
    return next.handle().pipe(
      retry({
        count: 1,
        delay: (error: unknown) => (is503(error) ? timer(50) : throwError(() => error)),
      }),
    );
  }
}

/** Audits each run: one execution, the audit and the answer both fed by it. */
@Injectable()
class AuditInterceptor implements NestInterceptor {
  private readonly logger = new Logger('audit');
  intercept(_context: ExecutionContext, next: CallHandler): Observable<unknown> {
    const record = {
      next: (value: unknown) => this.logger.debug(`answered ${JSON.stringify(value)}`),
      error: (error: unknown) => this.logger.debug(`failed ${String(error)}`),
    };
    if (!withShare) return next.handle().pipe(tap(record));
    const run$ = next.handle().pipe(share());
    run$.subscribe(record);
    return run$;
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
    if (outages > 0) {
      outages -= 1;
      throw new ServiceUnavailableException({ code: 'provider_unavailable' });
    }
    return { ref: body.ref, id: rows[0].id };
  }
}

@Module({
  imports: [IdempotencyModule.forRootAsync({ useFactory: () => ({ globalKeys: true, pool }) })],
  controllers: [PaymentsController],
  providers: [
    { provide: APP_INTERCEPTOR, useClass: RetryInterceptor },
    { provide: APP_INTERCEPTOR, useClass: AuditInterceptor },
  ],
})
class PaymentsModule {}

describe.each<AdapterName>(['express', 'fastify'])(
  'adversary 38a (%s): an app retry around an audit that shares the run',
  (adapter) => {
    let fixture: PoolApp;

    beforeAll(async () => {
      fixture = await startPoolApp(`adv38a_share_retry_${adapter}`, {
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
      outages = 1;
      const first = await post();
      await sleep(200);
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
        first: first.status,
        calls,
        rows,
        again: again.status,
        same: JSON.stringify(again.body) === JSON.stringify(first.body),
      };
    };

    it('control: the audit written with tap() (no share)', async () => {
      withShare = false;
      const seen = await check(`tap-${adapter}`);
      expect(seen).toEqual({ first: 201, calls: 2, rows: 1, again: 201, same: true });
    });

    // Stated limit (docs/guides/transactions.md): the library tells the app's retry from an
    // audit by the rxjs chain the error went through; a retry it cannot see there (through a
    // Promise, or across a share()) is told the first try's error, as if the app had not
    // retried: never the handler run twice, and the error stored as without the retry.
    it.skip('the retry around a shared run runs the handler again', async () => {
      withShare = true;
      const seen = await check(`share-${adapter}`);
      expect(seen).toEqual({ first: 201, calls: 2, rows: 1, again: 201, same: true });
    });
  },
);
