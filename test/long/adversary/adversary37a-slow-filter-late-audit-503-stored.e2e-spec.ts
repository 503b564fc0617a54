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
import { type Observable } from 'rxjs';
import { type Pool } from 'pg';
import request from 'supertest';
import { type AdapterName } from '../../support/bootstrap.js';
import { IdempotencyModule, Idempotent, RetryLaterError } from '../../../lib/index.js';
import { type PoolApp, startPoolApp } from '../../support/pool-app.js';

/**
 * Adversary, round 37a: round 35a's late side audit after a 503 `retry_later`, with the app's
 * exception filter awaiting its error tracker before it writes the 503: round 35a's guard
 * (`raw.writableEnded`, lib/idempotency.interceptor.ts:244) does not see an answer still in a
 * filter. The audit's run claims the released key and runs the handler again for nobody; the
 * 503 the filter then writes is stored as the key's final answer: every retry is told "retry
 * later" for the key's whole retention, and the provider was charged.
 *
 * The app: round 35a's (a global audit "on the side" that subscribes once its audit entry is
 * opened, 100 ms; `POST /payments` inserts a row, then charges a provider that is down on the
 * first call: `RetryLaterError`, as docs/reference/problems.md says), plus a global `@Catch()`
 * filter that reports each error to an error tracker (awaited, 300 ms) before it replies, as
 * docs/guides/requests-and-replays.md allows for filters (a slow filter: run-owned.ts:374-378).
 *
 * What happens: run 1's handler throws `RetryLaterError`: rolled back, the key released,
 * `gaveBack` (lib/http/run-owned.ts:374-386, lib/transaction/handler-failure.ts:35-45); the
 * mapped 503 goes to the filter, which awaits. At 100 ms the audit subscribes: run 2 starts,
 * `forgetLibraryAnswers` (interceptor.ts:145) takes back the 503's `Retry-After` and forgets
 * that the library wrote it (`forgetWrittenLibraryError`); run 1 neither steps aside nor shares
 * (gaveBack), so run 2 `claimAfter`s: `writableEnded` is false (the filter has not replied), it
 * claims the key and runs the handler: the provider is up, it charges, its value goes to the
 * audit. At 300 ms the filter writes the 503: run 2's hold takes it for its own answer; no
 * library error noted any more (forgotten), a value returned and a 5xx written: "the value
 * could not be written" (run-owned.ts:186-204, handler-result.ts:93-99): its effects rolled
 * back, the 503 `retry_later` STORED as the key's answer. The client got 503 without
 * `Retry-After`; its retry replays 503 `retry_later`, and every retry after it.
 *
 * Expected: the audit's late run runs nothing (the request is answered, in its filter): the
 * handler runs once, no charge; the client's 503 keeps its `Retry-After`; its retry runs the
 * handler and gets 201.
 *
 * Control: the same app, its filter replying at once: round 35a's guard holds.
 *
 * Severity: critical (a key poisoned with a stored "retry later": the payment can never be
 * made with it; a charge made for a request answered 503 and rolled back; the 503 without the
 * Retry-After the library promises).
 */
let pool: Pool;
let trackerMs = 300;
let calls = 0;
let charges = 0;
let providerDown = true;
const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

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

/** Reports every error to an error tracker (awaited), then answers it as Nest would. */
@Catch()
class ReportingFilter implements ExceptionFilter {
  constructor(private readonly adapterHost: HttpAdapterHost) {}
  async catch(error: unknown, host: ArgumentsHost) {
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
    const { rows } = await pool.query<{ id: number }>(
      'INSERT INTO payments (ref) VALUES ($1) RETURNING id',
      [body.ref],
    );
    if (providerDown) {
      providerDown = false;
      throw new RetryLaterError('the payment provider is down');
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
    { provide: APP_FILTER, useClass: ReportingFilter },
  ],
})
class PaymentsModule {}

describe.each<AdapterName>(['express', 'fastify'])(
  'adversary 37a (%s): a late side audit while a slow filter awaits a 503',
  (adapter) => {
    let fixture: PoolApp;

    beforeAll(async () => {
      fixture = await startPoolApp(`adv37a_slow_503_${adapter}`, {
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
      providerDown = true;
      const first = await post();
      await sleep(300);
      const callsBefore = calls;
      const chargesBefore = charges;
      const again = await post();
      return {
        first: {
          status: first.status,
          retryAfter: first.headers['retry-after'] !== undefined,
        },
        callsBefore,
        chargesBefore,
        again: { status: again.status, replayed: again.headers['idempotent-replayed'] },
        charges,
      };
    };

    it('control: the filter replies at once (written before the audit subscribes)', async () => {
      trackerMs = 0;
      const seen = await check(`quick-${adapter}`);
      expect(seen).toEqual({
        first: { status: 503, retryAfter: true },
        callsBefore: 1,
        chargesBefore: 0,
        again: { status: 201, replayed: undefined },
        charges: 1,
      });
    });

    it('the filter awaits its tracker: nothing runs again, the 503 is not stored', async () => {
      trackerMs = 300;
      const seen = await check(`slow-${adapter}`);
      expect(seen).toEqual({
        first: { status: 503, retryAfter: true },
        callsBefore: 1,
        chargesBefore: 0,
        again: { status: 201, replayed: undefined },
        charges: 1,
      });
    });
  },
);
