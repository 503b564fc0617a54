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
import { IdempotencyModule, Idempotent } from '../../../lib/index.js';
import { type PoolApp, startPoolApp } from '../../support/pool-app.js';

/**
 * Adversary, round 37a: a side audit that subscribes late (round 33's idiom) while the app's
 * exception filter is still awaiting its error tracker (the handler's final error not yet
 * written) takes the failed run's key as if it were the app's `retry()`: the handler runs a
 * second time, for nobody, and its work commits with the first run's error as its answer.
 *
 * The app: a global `APP_INTERCEPTOR` audit "on the side" that watches once its audit entry is
 * opened (`const r$ = next.handle(); audit.open().then(() => r$.subscribe(record)); return
 * r$;`, 100 ms), and a global `@Catch()` exception filter that reports every error to an
 * error tracker (awaited, 300 ms) before it writes the answer, as docs/guides/
 * requests-and-replays.md allows ("a filter may be slow (an error tracker awaited)",
 * lib/http/run-owned.ts:374-378). `POST /payments` (`@Idempotent()`) inserts a payment row, then
 * asks the provider; the provider declines the first attempt (402, a final answer, stored),
 * and would approve a second one.
 *
 * What happens: run 1 (the returned one) owns the key; its handler throws the 402, final: run 1
 * still holds the response, its filter awaiting the tracker. At 100 ms the audit subscribes:
 * run 2 meets run 1 (lib/idempotency.interceptor.ts:250-277), whose `stepAside`
 * (lib/http/run-owned.ts:278-290) sees a failed, settled run whose answer is not written yet
 * (`answerWriting` false): it lets run 1's hold go, rolls back and gives the key back. Run 2
 * then `claimAfter`s (interceptor.ts:240-248): `raw.writableEnded` is false (the filter has not
 * replied yet, round 35a's guard does not see it), so it claims the key and runs the handler
 * again: the provider approves, the charge is made, a payment row inserted. Its value goes to
 * the audit only. At 300 ms the filter writes the 402 on the response: run 2's hold takes it
 * as its own answer (a value returned, a status < 500: not unwritten, run-owned.ts:186-204) and
 * commits it WITH run 2's effects. The client was told "card declined"; the card was charged,
 * the payment row is committed, and the retry replays "declined".
 *
 * Expected: the audit's late run is not the app's retry (an app's retry subscribes as the
 * error passes, before any filter): it is told the same error; the handler runs once, nothing
 * is charged, no row committed; the retry replays 402.
 *
 * Control: the same app, its filter replying at once (no tracker awaited): the 402 is written
 * before the audit subscribes, `writableEnded` holds, the audit's run runs nothing.
 *
 * Severity: critical (a charge made and committed for a request answered "declined", its
 * stored answer saying "declined" for ever: the client never learns it paid).
 */
let pool: Pool;
let trackerMs = 300;
let calls = 0;
let charges = 0;
let declines = 1;
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
    // The provider declines the first attempt: a final answer, stored.
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
    { provide: APP_FILTER, useClass: ReportingFilter },
  ],
})
class PaymentsModule {}

describe.each<AdapterName>(['express', 'fastify'])(
  'adversary 37a (%s): a late side audit while a slow exception filter awaits',
  (adapter) => {
    let fixture: PoolApp;

    beforeAll(async () => {
      fixture = await startPoolApp(`adv37a_slow_filter_${adapter}`, {
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
      await sleep(300);
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

    it('control: the filter replies at once (written before the audit subscribes)', async () => {
      trackerMs = 0;
      const seen = await check(`quick-${adapter}`);
      expect(seen).toEqual({
        first: { status: 402, code: 'card_declined' },
        calls: 1,
        charges: 0,
        rows: 0,
        again: { status: 402, code: 'card_declined' },
      });
    });

    it('the filter awaits its tracker: the audit does not run the handler again', async () => {
      trackerMs = 300;
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
