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
import { mergeMap, type Observable } from 'rxjs';
import { type Pool } from 'pg';
import request from 'supertest';
import { type AdapterName } from '../../support/bootstrap.js';
import { IdempotencyModule, Idempotent } from '../../../lib/index.js';
import { type PoolApp, startPoolApp } from '../../support/pool-app.js';

/**
 * Adversary, round 33: a side watcher that subscribes once its own set-up is done, after the
 * handler settled, while the answer is still on its way through an app interceptor.
 *
 * The app, two global interceptors outside `@Idempotent()`:
 *  - signing (outer): `next.handle().pipe(mergeMap(async (v) => ({ ...v, signature: await
 *    sign(v) })))`, the signing call taking 300 ms;
 *  - audit: `const r$ = next.handle(); audit.open().then(() => r$.subscribe(record)); return
 *    r$;` (the audit-on-the-side idiom, watching once its entry is opened: 100 ms).
 * The handler inserts a payment and answers its id.
 *
 * Run 1 (the returned one) owns the key; the handler answers `{ id: 1 }` at once and settles
 * (lib/http/run-owned.ts:319-321, `settle`), and its value waits in the signing step. At
 * 100 ms the audit subscribes: run 2 meets run 1 (lib/idempotency.interceptor.ts:211, :258), whose
 * claim is decided, and asks it to step aside (:235). Run 1 is settled and its answer not yet
 * being written, so it steps aside as if the app retried it (run-owned.ts:272-278): its hold is
 * lifted, its transaction rolled back (payment 1 gone), its key released. Run 2 claims the key
 * again (interceptor.ts:236-237, :225-229) and runs the handler a second time (payment 2), in a
 * transaction of its own, with a hold of its own on the same response. At 300 ms the signed
 * answer of run 1 (`id: 1`) is written: run 2's hold commits it with run 2's effects.
 * Nothing failed and nothing retried: the request's answer (and every replay) names payment
 * 1, which does not exist; payment 2 was made by a second run of the handler that no one was
 * answered. A handler with an outside effect (a charge) makes it twice.
 *
 * Expected: the handler runs once (the late run joins the settled run's outcome, or replays
 * what it stores), one row whose id the answer carries, replayed by the retry.
 *
 * Control: the audit subscribes at once (before the claim lands): it joins run 1, one run,
 * one row, the answer's id, replayed.
 *
 * Severity: high (a handler run twice for one request, and a stored answer that names work
 * rolled back; with no failure and no retry in the app).
 */
let pool: Pool;
let auditOpenMs = 100;
let calls = 0;
const signMs = 300;
const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

/** Signs every answer: a call to a signing service (slow) after the handler's value. */
@Injectable()
class SigningInterceptor implements NestInterceptor {
  intercept(_context: ExecutionContext, next: CallHandler): Observable<unknown> {
    return next.handle().pipe(
      mergeMap(async (value) => {
        await sleep(signMs);
        return { ...(value as object), signature: 'sig' };
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
    void sleep(auditOpenMs).then(() =>
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
    return { ref: body.ref, id: rows[0].id };
  }
}

@Module({
  imports: [IdempotencyModule.forRootAsync({ useFactory: () => ({ globalKeys: true, pool }) })],
  controllers: [PaymentsController],
  providers: [
    { provide: APP_INTERCEPTOR, useClass: SigningInterceptor },
    { provide: APP_INTERCEPTOR, useClass: AuditInterceptor },
  ],
})
class PaymentsModule {}

describe.each<AdapterName>(['express', 'fastify'])(
  'adversary 33 (%s): a side watcher that subscribes after the handler settled',
  (adapter) => {
    let fixture: PoolApp;

    beforeAll(async () => {
      fixture = await startPoolApp(`adv33_late_side_${adapter}`, {
        module: PaymentsModule,
        max: 4,
        adapter,
        usePool: (started) => (pool = started),
        setup: async (admin) => {
          await admin.query('CREATE TABLE payments (id serial PRIMARY KEY, ref text NOT NULL)');
        },
      });
    }, 60_000);

    afterAll(() => fixture?.close());

    const check = async (ref: string) => {
      const post = () =>
        request(fixture.app.getHttpServer())
          .post('/payments')
          .set('Idempotency-Key', ref)
          .send({ ref })
          .timeout(5000);
      calls = 0;
      const first = await post();
      await sleep(600);
      const rows = (
        await fixture.admin.query<{ id: number }>('SELECT id FROM payments WHERE ref = $1', [ref])
      ).rows;
      const keys = (
        await fixture.admin.query<{ state: string }>(
          'SELECT state FROM idempotency_keys WHERE key = $1',
          [ref],
        )
      ).rows;
      const open = (
        await fixture.admin.query<{ n: string }>(
          `SELECT count(*) AS n FROM pg_stat_activity
            WHERE datname = current_database() AND state LIKE 'idle in transaction%'`,
        )
      ).rows[0];
      const again = await post();
      return {
        first: { status: first.status, body: first.body as unknown },
        calls,
        rows: rows.map((row) => row.id),
        keys: keys.map((key) => key.state),
        openTransactions: Number(open.n),
        again: { status: again.status, body: again.body as unknown },
      };
    };

    it('the audit opens slowly (subscribes while the answer is being signed): one run, its answer replayed', async () => {
      auditOpenMs = 100;
      const seen = await check(`late-${adapter}`);
      const id = (seen.first.body as { id: number }).id;
      expect(seen).toEqual({
        first: { status: 201, body: { ref: `late-${adapter}`, id, signature: 'sig' } },
        calls: 1,
        rows: [id],
        keys: ['done'],
        openTransactions: 0,
        again: seen.first,
      });
    });

    it('control: the audit opens at once (subscribes before the claim lands)', async () => {
      auditOpenMs = 0;
      const seen = await check(`quick-${adapter}`);
      const id = (seen.first.body as { id: number }).id;
      expect(seen).toEqual({
        first: { status: 201, body: { ref: `quick-${adapter}`, id, signature: 'sig' } },
        calls: 1,
        rows: [id],
        keys: ['done'],
        openTransactions: 0,
        again: seen.first,
      });
    });
  },
);
