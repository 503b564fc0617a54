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
  UseInterceptors,
} from '@nestjs/common';
import { APP_INTERCEPTOR } from '@nestjs/core';
import { type Observable, retry, throwError, timer } from 'rxjs';
import { type Pool } from 'pg';
import request from 'supertest';
import { IdempotencyModule, Idempotent } from '../../../lib/index.js';
import { type PoolApp, startPoolApp } from '../../support/pool-app.js';

/**
 * Adversary, round 39a: the app's own rxjs `retry()` (the idiom the guide names) is never taken
 * for a retry when an audit "on the side" (a second subscription of `next.handle()`, the idiom
 * the library supports) sits inside it, or outside it: each retry is compared with the LATEST run of the
 * request only, which is the audit's run, not the failed run the retry took the error of. The
 * retry is told the first try's 503, the handler never runs again, and that 503 is stored as
 * the key's answer, for ever; the same app without the audit answers 201. (Seen, both modes, both
 * layouts: first 503, calls 1, rows 0, the client's retry replays 503.)
 *
 * The app: two global `APP_INTERCEPTOR`s. Outer: a retry of a passing outage,
 * `next.handle().pipe(retry({ count: 1, delay: (e) => is503(e) ? timer(50) : throwError(() => e) }))`.
 * Inner: an audit that watches every request on the side: `const r$ = next.handle();
 * r$.subscribe(record); return r$;` ("at once"), or the same after its audit entry opened,
 * 20 ms later ("late", round 33's idiom). Second layout: the audit global, the same retry on
 * the controller (`@UseInterceptors`), so inside the audit: each audit runs through a retry of
 * its own. `POST /payments` (`@Idempotent()`) inserts a row,
 * then asks the provider: its first call fails 503 (a passing outage), its second succeeds.
 *
 * What happens ("at once"): the audit's subscription is run 1 (it owns the key and runs the
 * handler); the returned one, run 2, joins it and is told its 503 (lib/idempotency.interceptor.ts
 * :272, `handOn`: its error chain is the app's chain, through `retry`). `retry` subscribes again:
 * the audit interceptor runs again and subscribes first (run 3); `startRun`
 * (lib/http/earlier-run.ts:97-101, lib/idempotency.interceptor.ts:219) makes run 2 its `earlier`, whose chain it does not run into
 * (an audit), so it is told the 503 (right). Then the retry's own subscription (run 4) meets
 * run 3 as its `earlier` (lib/idempotency.interceptor.ts:224-229): `run3.retriedBy(chain)` looks
 * at run 3's error chain (the audit's, closed), not at run 2's, which the retry did run into,
 * so `retryOf` is undefined, run 1's `outcome` (lib/http/run-owned.ts:313) tells it the 503
 * again: the handler never runs a second time, Nest writes 503, and the library stores it (an
 * HttpException 5xx is final). "late": the same, the audit's run coming between run 1 and the
 * retry's run. Second layout: the same, the audit's own retry and the request's retry each
 * meeting the other's run as the latest.
 *
 * Expected: the app's retry runs the handler again (docs/guides/transactions.md:195, 197: the app's
 * retry outside `@Idempotent()` runs the handler again, its earlier try rolled back): 201, one
 * row, the client's retry replays 201; the audits are told what the request came to.
 *
 * Control: the same app without the audit: 201, one row, replay 201 (passes today).
 *
 * Severity: medium-high (no double effect, but the app's documented rxjs retry is silently
 * defeated by a supported audit idiom, and the passing outage is stored as the answer for ever:
 * the payment a retry would have made is never made for that key).
 */
let pool: Pool;
let audit: 'none' | 'at-once' | 'late' = 'none';
let calls = 0;
let outages = 1;
const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));
const is503 = (error: unknown) => (error as { getStatus?: () => number })?.getStatus?.() === 503;

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

/** Audits every request on the side. */
@Injectable()
class AuditInterceptor implements NestInterceptor {
  private readonly logger = new Logger('audit');
  intercept(_context: ExecutionContext, next: CallHandler): Observable<unknown> {
    const result$ = next.handle();
    const record = () =>
      result$.subscribe({
        next: (value) => this.logger.debug(`answered ${JSON.stringify(value)}`),
        error: (error: unknown) => this.logger.debug(`failed ${String(error)}`),
      });
    if (audit === 'at-once') record();
    if (audit === 'late') void sleep(20).then(record);
    return result$;
  }
}

const pay = async (ref: string) => {
  calls += 1;
  const { rows } = await pool.query<{ id: number }>(
    'INSERT INTO payments (ref) VALUES ($1) RETURNING id',
    [ref],
  );
  if (outages > 0) {
    outages -= 1;
    throw new ServiceUnavailableException('provider unavailable');
  }
  return { ref, id: rows[0].id };
};

@Controller()
class PaymentsController {
  @Post('payments')
  @Idempotent()
  pay(@Body() body: { ref: string }) {
    return pay(body.ref);
  }
}

/** The same route, its retry on the controller: inside the global audit. */
@Controller()
@UseInterceptors(RetryInterceptor)
class RetriedPaymentsController {
  @Post('payments')
  @Idempotent()
  pay(@Body() body: { ref: string }) {
    return pay(body.ref);
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

/** The audit global, the retry on the controller: each audit runs through a retry of its own. */
@Module({
  imports: [IdempotencyModule.forRootAsync({ useFactory: () => ({ globalKeys: true, pool }) })],
  controllers: [RetriedPaymentsController],
  providers: [{ provide: APP_INTERCEPTOR, useClass: AuditInterceptor }],
})
class AuditOutsideModule {}

describe.each([
  ['retry global, audit inside it', 'inside', PaymentsModule],
  ['audit global, retry on the controller', 'outside', AuditOutsideModule],
] as const)('adversary 39a: the app retry() and a side audit (%s)', (_layout, name, module) => {
  let fixture: PoolApp;

  beforeAll(async () => {
    fixture = await startPoolApp(`adv39a_retry_side_audit_${name}`, {
      module,
      max: 4,
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
    return { first: first.status, calls, rows, again: again.status };
  };

  it('control: no audit, the retry runs the handler again', async () => {
    audit = 'none';
    expect(await check(`none-${name}`)).toEqual({ first: 201, calls: 2, rows: 1, again: 201 });
  });

  // Stated limit (docs/guides/transactions.md, "The app's retry and an audit"): an audit that
  // joined the failed try was told its error too, and carried it on to its own subscriber; the
  // library cannot tell that subscriber from Nest's, which writes the error as the answer (round
  // 39a's critical break: a retry given the key while the client's error was still on its way).
  // So the key is given back for a retry only once every subscription told the error retried
  // it; here the audit's did not, and the retry is told the first try's error: never the
  // handler run twice, the error stored as without the retry.
  it.skip.each(['at-once', 'late'] as const)(
    'an audit on the side (%s): the retry still runs the handler again',
    async (mode) => {
      audit = mode;
      expect(await check(`${mode}-${name}`)).toEqual({ first: 201, calls: 2, rows: 1, again: 201 });
    },
  );

  it.each(['at-once', 'late'] as const)(
    'an audit on the side (%s): the retry is told the first error, the handler ran once',
    async (mode) => {
      audit = mode;
      expect(await check(`told-${mode}-${name}`)).toEqual({
        first: 503,
        calls: 1,
        rows: 0,
        again: 503,
      });
    },
  );
});
