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
import { type Observable, timeout } from 'rxjs';
import { type Pool } from 'pg';
import request from 'supertest';
import { type AdapterName } from '../../support/bootstrap.js';
import { IdempotencyModule, Idempotent } from '../../../lib/index.js';
import { type PoolApp, startPoolApp } from '../../support/pool-app.js';

/**
 * Adversary, round 35a: the same late side audit as adversary35a-late-audit-reruns-after-503,
 * with no failure of the handler's: after an outer `timeout()` detached it and its late value
 * (an entity, not plain data) was rolled back, the late audit runs the handler again for
 * nobody and holds its key and transaction open.
 *
 * The app: global interceptors `next.handle().pipe(timeout(50))` (outer) and the audit "on the
 * side" that watches once its entry is opened (300 ms). `POST /payments` (`@Idempotent()`)
 * inserts a row, charges a provider (slow the first time: 150 ms) and returns a `Payment`
 * entity (a class instance).
 *
 * What happens: the timeout answers (Nest's 500 for rxjs' TimeoutError) and unsubscribes run 1,
 * which detaches its handler (lib/http/run-owned.ts:436-443). The handler settles with an
 * entity: not plain data, so its work is rolled back and its key released, as documented
 * (lib/http/settle-detached.ts:38-43). At 300 ms the audit subscribes: run 2 meets run 1, whose
 * outcome is `claimAgain` once detached work settled (run-owned.ts:298), and claims the key
 * (lib/idempotency.interceptor.ts:246-258, :230-234): the handler runs a second time (a
 * second charge, for nobody), its value goes to the audit alone, the response has ended, so
 * its hold never commits: the transaction stays idle in transaction and the heartbeat keeps
 * the key `started` (run-owned.ts:332-335). The client's retry gets 409 `key_in_progress`.
 * A fix for the 503 case that looks at `failed` alone misses this one (no failure here).
 *
 * Expected: the late run does not claim (the request's answer went out): one charge for the
 * first request, nothing held; the client's retry runs the handler (the entity was not
 * storable) and gets 201.
 *
 * Control: the audit subscribes at once (it owns the key, the returned run joins it): the
 * timeout's answer detaches the handler the same way (run-owned.ts:134-139), its entity is
 * rolled back and the key released; no run after: one run, nothing held, the retry 201.
 *
 * Severity: critical (a handler run twice for one request; a key held and a transaction and
 * pooled connection kept for the process's life; the retry refused 409).
 *
 * Timings (stop 46): the timeout 250 ms, the provider's first call 400 ms, the late audit at
 * 700 ms (after the detached handler settled, as before): with `timeout(50)` the client's
 * retry itself ran past the timeout on CI's loaded machine (500, not 201).
 */
let pool: Pool;
let auditOpenMs = 700;
let calls = 0;
let charges = 0;
let slow = true;
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

@Injectable()
class TimeoutInterceptor implements NestInterceptor {
  intercept(_context: ExecutionContext, next: CallHandler): Observable<unknown> {
    return next.handle().pipe(timeout(250));
  }
}

class Payment {
  constructor(
    readonly ref: string,
    readonly id: number,
  ) {}
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
    // The payment provider: slow for the first call.
    await sleep(slow ? 400 : 0);
    slow = false;
    charges += 1;
    return new Payment(body.ref, rows[0].id);
  }
}

@Module({
  imports: [IdempotencyModule.forRootAsync({ useFactory: () => ({ globalKeys: true, pool }) })],
  controllers: [PaymentsController],
  providers: [
    { provide: APP_INTERCEPTOR, useClass: TimeoutInterceptor },
    { provide: APP_INTERCEPTOR, useClass: AuditInterceptor },
  ],
})
class PaymentsModule {}

describe.each<AdapterName>(['express', 'fastify'])(
  'adversary 35a (%s): a side audit that subscribes after a timeout detached the handler',
  (adapter) => {
    let fixture: PoolApp;

    beforeAll(async () => {
      fixture = await startPoolApp(`adv35a_late_timeout_${adapter}`, {
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
      slow = true;
      const first = await post();
      await sleep(1000);
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
        first: { status: 500, code: undefined },
        afterFirst: { calls: 1, charges: 1, rows: 0, held: 0, openTransactions: 0 },
        again: 201,
        charges: 2,
      });
    });

    it('the audit opens slowly (subscribes after the timeout answered): the handler is not run again', async () => {
      auditOpenMs = 700;
      const seen = await check(`late-${adapter}`);
      expect(seen).toEqual({
        first: { status: 500, code: undefined },
        afterFirst: { calls: 1, charges: 1, rows: 0, held: 0, openTransactions: 0 },
        again: 201,
        charges: 2,
      });
    });
  },
);
