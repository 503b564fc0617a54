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
} from '@nestjs/common';
import { APP_INTERCEPTOR } from '@nestjs/core';
import { type Observable } from 'rxjs';
import { type Pool } from 'pg';
import request from 'supertest';
import { type AdapterName } from '../../support/bootstrap.js';
import { IdempotencyModule, Idempotent, RetryLaterError } from '../../../lib/index.js';
import { type PoolApp, startPoolApp } from '../../support/pool-app.js';

/**
 * Adversary, round 35a: a side audit that subscribes late (round 33's idiom) after the
 * handler failed with a passing error (503 `retry_later`) runs the handler a second time, for
 * nobody, and holds its key and transaction open with no answer ever to commit them.
 *
 * The app: a global `APP_INTERCEPTOR` audit "on the side" that watches once its audit entry
 * is opened (`const r$ = next.handle(); audit.open().then(() => r$.subscribe(record)); return
 * r$;`, 100 ms). `POST /payments` (`@Idempotent()`) inserts a row, then charges a provider; the
 * provider is down on the first call, so it throws `RetryLaterError`, as docs/reference/
 * problems.md says to.
 *
 * What happens: run 1 (the returned one) owns the key; its handler throws, the failure is a
 * passing one: rolled back, the key released, `gaveBack = true` (lib/http/run-owned.ts:381-386,
 * lib/transaction/handler-failure.ts:36-45), and the 503 goes out to the client. At 100 ms
 * the audit subscribes: run 2 meets run 1 (lib/idempotency.interceptor.ts:236-246), which
 * neither steps aside (run-owned.ts:282, `gaveBack`) nor shares an outcome (:293, `gaveBack`):
 * run 2 claims the key as if it were the app's `retry()` (interceptor.ts:230-234, :246) and
 * runs the handler a second time. The provider is up now: it charges. Its value goes to the
 * audit's subscriber only; the response has ended, so nothing is ever written: the hold's
 * commit never comes, the handler's transaction stays open (idle in transaction, the payment
 * row uncommitted, one pooled connection gone) and its heartbeat keeps renewing the lease
 * (run-owned.ts:332-335, settled with a value: `untilWritten`). The client, told "retry later
 * with the same key", gets 409 `key_in_progress` on every retry while the process lives; the
 * charge was made for a request answered 503, and is made again once the key is ever freed.
 * Round 34 fixed this for GraphQL field runs (a later run after the error went out is told
 * the same error); the HTTP route path was left as it was.
 *
 * Expected: a later run that starts after the failed run's answer went out is not the app's
 * retry: it is told the same error (or replays), the handler runs once, nothing held; the
 * client's retry after Retry-After runs it and gets 201.
 *
 * Control: the audit subscribes at once (the idiom as written): it joins run 1's outcome, the
 * handler runs once, nothing held, the retry gets 201.
 *
 * Severity: critical (a handler run twice for one request with an outside effect made for a
 * 503; a key held `started` and a transaction left open for the process's life, the retry
 * refused 409 for ever; a pooled connection lost per request).
 */
let pool: Pool;
let auditOpenMs = 100;
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
    const watch = () =>
      result$.subscribe({
        next: (value) => this.logger.debug(`answered ${JSON.stringify(value)}`),
        error: (error: unknown) => this.logger.debug(`failed ${String(error)}`),
      });
    // Opened at once (the idiom as written), or once its entry is opened (a call of its own).
    if (auditOpenMs === 0) watch();
    else void sleep(auditOpenMs).then(watch);
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
    // The payment provider: down for the first call, as documented, a RetryLaterError.
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
  providers: [{ provide: APP_INTERCEPTOR, useClass: AuditInterceptor }],
})
class PaymentsModule {}

describe.each<AdapterName>(['express', 'fastify'])(
  'adversary 35a (%s): a side audit that subscribes after the handler failed with a 503',
  (adapter) => {
    let fixture: PoolApp;

    beforeAll(async () => {
      fixture = await startPoolApp(`adv35a_late_503_${adapter}`, {
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
      // A run left holding its transaction (the break) would keep the pool from ending.
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
      await sleep(600);
      const afterFirst = {
        calls,
        charges,
        rows: Number(
          (
            await fixture.admin.query<{ n: string }>(
              'SELECT count(*) AS n FROM payments WHERE ref = $1',
              [ref],
            )
          ).rows[0].n,
        ),
        // A key held (not released, not done): its lease still runs.
        held: (
          await fixture.admin.query<{ state: string }>(
            `SELECT state FROM idempotency_keys
              WHERE key = $1 AND state = 'started' AND locked_until > now()`,
            [ref],
          )
        ).rows.length,
        openTransactions: Number(
          (
            await fixture.admin.query<{ n: string }>(
              `SELECT count(*) AS n FROM pg_stat_activity
                WHERE datname = current_database() AND state LIKE 'idle in transaction%'`,
            )
          ).rows[0].n,
        ),
      };
      const again = await post();
      await sleep(300);
      return {
        first: { status: first.status, code: (first.body as { code?: string }).code },
        afterFirst,
        again: again.status,
        charges,
      };
    };

    it('control: the audit opens at once (subscribes before the claim lands)', async () => {
      auditOpenMs = 0;
      const seen = await check(`quick-${adapter}`);
      expect(seen).toEqual({
        first: { status: 503, code: 'retry_later' },
        afterFirst: { calls: 1, charges: 0, rows: 0, held: 0, openTransactions: 0 },
        again: 201,
        charges: 1,
      });
    });

    it('the audit opens slowly (subscribes after the 503 went out): the handler is not run again', async () => {
      auditOpenMs = 100;
      const seen = await check(`late-${adapter}`);
      expect(seen).toEqual({
        first: { status: 503, code: 'retry_later' },
        afterFirst: { calls: 1, charges: 0, rows: 0, held: 0, openTransactions: 0 },
        again: 201,
        charges: 1,
      });
    });
  },
);
