import {
  type ArgumentsHost,
  Body,
  type CallHandler,
  Catch,
  Controller,
  type ExceptionFilter,
  type ExecutionContext,
  HttpException,
  Injectable,
  Logger,
  Module,
  type NestInterceptor,
  Post,
} from '@nestjs/common';
import { APP_FILTER, APP_INTERCEPTOR, HttpAdapterHost } from '@nestjs/core';
import { type Observable, retry } from 'rxjs';
import { type Pool } from 'pg';
import request from 'supertest';
import { type AdapterName } from '../../support/bootstrap.js';
import { IdempotencyModule, Idempotent } from '../../../lib/index.js';
import { type PoolApp, startPoolApp } from '../../support/pool-app.js';

/**
 * Adversary, round 39a: a late side audit (round 33's idiom) is told the request's error, as
 * it should; but the audit's own subscription runs through the app's `retry()` interceptor too
 * (the audit sits outside it), and that retry takes the error it was told and subscribes again.
 * That subscription runs into the audit's chain, still open, so it is taken for the app's
 * retry of the AUDIT's run, which hands it on to the run the audit joined (the request's last
 * try): that try steps aside (rolled back, its key given back) while the slow exception filter
 * has not written its answer yet. The request's final 402 then goes out unstored, the key free:
 * the client's retry with the same key runs the payment again and is answered 201, charged.
 *
 * The app: three global pieces. `APP_INTERCEPTOR` audit "on the side", outermost (watches once
 * its audit entry opened: `const r$ = next.handle(); audit.open().then(() => r$.subscribe(record));
 * return r$;`, 100 ms); `APP_INTERCEPTOR` retry inside it, `next.handle().pipe(retry(1))` (one
 * more try on any error); a `@Catch()` `APP_FILTER` that awaits its error tracker (300 ms) before
 * it answers, as the guide allows ("exception filters, however slow they are",
 * docs/guides/transactions.md:197). `POST /payments` (`@Idempotent()`) inserts a payment row,
 * asks the provider: it declines the first two attempts (402, final), would approve a third.
 *
 * What happens: run 1 declines; the app's retry (run 2) is its retry (chain), steps it aside,
 * claims anew, declines: retry(1) is spent, the 402 goes to the slow filter. At 100 ms the audit
 * subscribes: run 3 meets run 2, is told its 402 (lib/http/run-owned.ts:313, `failure()`,
 * handed on by lib/idempotency.interceptor.ts:272, `run.handOn`). The audit's copy of the
 * retry interceptor takes it and subscribes again: run 4, whose `earlier` is run 3 and whose
 * chain runs into run 3's error chain (the audit chain's `retry` subscriber, open), so
 * `retryOf` (interceptor.ts:224-229) is run 3; run 3's `stepAside` hands on to the run it
 * followed (interceptor.ts:236, `of === run ? following : of`): run 2's `stepAside(run 2)`
 * (run-owned.ts:293-307) sees a failed, settled run whose answer is not written yet
 * (`answerWriting` false): it lets its hold go, rolls back and gives the key back. (Run 4 then
 * meets run 2 as the run claiming now, `claimingNow`, and is told the 402: the handler is not
 * run for the audit.) At 300 ms the filter writes the 402 on a response no run holds any more:
 * not stored. The client's retry finds the key free and runs the handler: approved, charged,
 * 201 stored. Seen, Express and Fastify: first 402 `card_declined`; the retry 201; calls 3,
 * charges 1 (the third call is the client's retry's).
 *
 * Expected: the audit is told the 402 and nothing an audit's chain does afterwards (its own
 * copy of the app's retry included) touches the request's last try: its 402 is stored with no
 * effects, calls 2, no charge, no row, the retry replays 402.
 *
 * Control: the same app, its filter answering at once: the 402 is written before the audit
 * subscribes, the audit's runs run nothing (`claimAfter`'s `writableEnded` guard): passes today.
 *
 * Severity: critical (one key, two final answers: a payment answered "declined" is charged by
 * the client's retry of it, which the stored 402 should have answered).
 */
let pool: Pool;
let trackerMs = 300;
let calls = 0;
let charges = 0;
let declines = 2;
/** How long the handler takes; the audit subscribes at 100 ms, so 150 ms means while it runs. */
let handlerMs = 0;
/** Resolved when the filter is given the request's final error: the audit subscribes after it. */
let filterEntered: Promise<void> = Promise.resolve();
let enterFilter = () => {};
let auditAfterFilter = true;
const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

/** Audits on the side: opens its audit entry first (a call of its own), then watches. */
@Injectable()
class AuditInterceptor implements NestInterceptor {
  private readonly logger = new Logger('audit');
  intercept(_context: ExecutionContext, next: CallHandler): Observable<unknown> {
    const result$ = next.handle();
    // Gated on the filter (not on a clock) so that the audit meets the settled last try however
    // slow the machine is: at 100 ms a loaded machine may still be running the first try.
    const opened = auditAfterFilter ? filterEntered.then(() => sleep(20)) : sleep(100);
    void opened.then(() =>
      result$.subscribe({
        next: (value) => this.logger.debug(`answered ${JSON.stringify(value)}`),
        error: (error: unknown) => this.logger.debug(`failed ${String(error)}`),
      }),
    );
    return result$;
  }
}

/** One more try on any error. */
@Injectable()
class RetryInterceptor implements NestInterceptor {
  intercept(_context: ExecutionContext, next: CallHandler): Observable<unknown> {
    return next.handle().pipe(retry(1));
  }
}

/** Reports every error to an error tracker (awaited), then answers it as Nest would. */
@Catch()
class ReportingFilter implements ExceptionFilter {
  constructor(private readonly adapterHost: HttpAdapterHost) {}
  async catch(error: unknown, host: ArgumentsHost) {
    enterFilter();
    if (trackerMs > 0) await sleep(trackerMs);
    const status = error instanceof HttpException ? error.getStatus() : 500;
    const body = error instanceof HttpException ? error.getResponse() : { message: 'error' };
    this.adapterHost.httpAdapter.reply(host.switchToHttp().getResponse(), body, status);
  }
}

@Controller()
class PaymentsController {
  @Post('payments')
  @Idempotent()
  async pay(@Body() body: { ref: string }) {
    calls += 1;
    if (handlerMs > 0) await sleep(handlerMs);
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
    { provide: APP_INTERCEPTOR, useClass: RetryInterceptor },
    { provide: APP_FILTER, useClass: ReportingFilter },
  ],
})
class PaymentsModule {}

describe.each<AdapterName>(['express', 'fastify'])(
  'adversary 39a (%s): a late side audit whose own chain runs the app retry(), slow filter',
  (adapter) => {
    let fixture: PoolApp;

    beforeAll(async () => {
      fixture = await startPoolApp(`adv39a_audit_retry_${adapter}`, {
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
      declines = 2;
      filterEntered = new Promise<void>((resolve) => (enterFilter = resolve));
      const first = await post();
      await sleep(500);
      const rows = Number(
        (
          await fixture.admin.query<{ n: string }>(
            'SELECT count(*) AS n FROM payments WHERE ref = $1',
            [ref],
          )
        ).rows[0].n,
      );
      const again = await post();
      await sleep(300);
      return {
        first: { status: first.status, code: (first.body as { code?: string }).code },
        calls,
        charges,
        rows,
        again: { status: again.status, code: (again.body as { code?: string }).code },
      };
    };

    beforeEach(() => {
      handlerMs = 0;
      auditAfterFilter = true;
    });

    it('control: the filter answers at once', async () => {
      trackerMs = 0;
      expect(await check(`quick-${adapter}`)).toEqual({
        first: { status: 402, code: 'card_declined' },
        calls: 2,
        charges: 0,
        rows: 0,
        again: { status: 402, code: 'card_declined' },
      });
    });

    it("the filter awaits its tracker: the audit chain's retry leaves the request's 402 stored", async () => {
      trackerMs = 300;
      expect(await check(`slow-${adapter}`)).toEqual({
        first: { status: 402, code: 'card_declined' },
        calls: 2,
        charges: 0,
        rows: 0,
        again: { status: 402, code: 'card_declined' },
      });
    });

    // Found by CI on a loaded machine: the audit subscribed while the first try still ran. It
    // joined that try and was told its error, so the app's retry is told it too and the handler
    // runs once (docs/guides/transactions.md: "a retry after an audit that ... joined the try
    // while it ran" is told the first try's error). Still one final answer, no charge.
    it('the audit joins the first try while it runs: the retry is told its error, the handler runs once', async () => {
      trackerMs = 0;
      handlerMs = 150;
      auditAfterFilter = false;
      expect(await check(`joined-${adapter}`)).toEqual({
        first: { status: 402, code: 'card_declined' },
        calls: 1,
        charges: 0,
        rows: 0,
        again: { status: 402, code: 'card_declined' },
      });
    });
  },
);
