import {
  Body,
  type CallHandler,
  Controller,
  type ExecutionContext,
  Get,
  Injectable,
  Module,
  type NestInterceptor,
  Post,
} from '@nestjs/common';
import { APP_INTERCEPTOR } from '@nestjs/core';
import { catchError, type Observable, throwError, timeout, TimeoutError } from 'rxjs';
import { type Pool } from 'pg';
import request from 'supertest';
import { type AdapterName } from '../../support/bootstrap.js';
import { IdempotencyModule, Idempotent } from '../../../lib/index.js';
import { type PoolApp, startPoolApp } from '../../support/pool-app.js';

/**
 * Adversary, round 31: an outer timeout that falls back to running the request again, while
 * the first run's claim is still in flight (the pool busy with a slow report).
 *
 * The app: a global interceptor (outside `@Idempotent()`) that gives the chain 150 ms and, on
 * a timeout, runs it once more:
 *
 *   next.handle().pipe(
 *     timeout(150),
 *     catchError((e) => (e instanceof TimeoutError ? next.handle() : throwError(() => e))),
 *   );
 *
 * (its report route, `GET /report`, is not idempotent and has no timeout of its own). The pool
 * has one connection, and a report (400 ms) holds it when the payment comes in.
 *
 * What happens: run 1's claim waits for the connection; at 150 ms the timeout unsubscribes it.
 * lib/idempotency.interceptor.ts:189 (`finalize(() => run.claimDecided())`) marks its claim
 * decided although it is still in flight; lib/storage/while-subscribed.ts then hands the late
 * claim to `giveBackOrphaned` (lib/storage/claim-or-decide.ts:143-157), a release sent only
 * once that claim has landed. Run 2 (the re-subscription) waits for `earlier.claimed` (decided
 * already), finds no `stepAside`/`outcome` on run 1 (it never reached `runOwned`) and claims at
 * once (interceptor.ts:212, `claimAndRun`): its query queues behind run 1's claim and before
 * the orphan's release, finds the key held by a claim nobody runs, and the library answers its
 * own 409 `key_in_progress` to the only request using the key. The handler never runs; the
 * key is released a moment later.
 *
 * Expected: run 2 waits until run 1's claim has settled (and an orphaned one given back), then
 * claims it: 201, one row, the retry replays 201.
 *
 * Control: the same payment with no report holding the pool (no timeout): 201, one row,
 * replayed.
 *
 * Severity: medium (a library 409 answered for a request nobody else runs; not stored, the key
 * is given back, so a retry heals it).
 */
let pool: Pool;

@Injectable()
class TimeoutFallbackInterceptor implements NestInterceptor {
  intercept(context: ExecutionContext, next: CallHandler): Observable<unknown> {
    if (context.switchToHttp().getRequest<{ method: string }>().method === 'GET') {
      return next.handle();
    }
    return next.handle().pipe(
      timeout(150),
      catchError((error: unknown) =>
        error instanceof TimeoutError ? next.handle() : throwError(() => error),
      ),
    );
  }
}

@Controller()
class PaymentsController {
  @Get('report')
  async report() {
    await pool.query('SELECT pg_sleep(0.4)');
    return { ok: true };
  }

  @Post('payments')
  @Idempotent()
  async pay(@Body() body: { ref: string }) {
    await pool.query('INSERT INTO payments (ref) VALUES ($1)', [body.ref]);
    return { ref: body.ref, status: 'captured' };
  }
}

@Module({
  imports: [IdempotencyModule.forRootAsync({ useFactory: () => ({ globalKeys: true, pool }) })],
  controllers: [PaymentsController],
  providers: [{ provide: APP_INTERCEPTOR, useClass: TimeoutFallbackInterceptor }],
})
class PaymentsModule {}

describe.each<AdapterName>(['express', 'fastify'])(
  'adversary 31 (%s): a timeout fallback re-run while the first claim is in flight',
  (adapter) => {
    let fixture: PoolApp;

    beforeAll(async () => {
      fixture = await startPoolApp(`adv31_timeout_claim_${adapter}`, {
        module: PaymentsModule,
        max: 1,
        adapter,
        usePool: (started) => (pool = started),
        setup: async (admin) => {
          await admin.query('CREATE TABLE payments (id serial PRIMARY KEY, ref text NOT NULL)');
        },
      });
      // The pool's one connection opened before the tests.
      await request(fixture.app.getHttpServer()).get('/report');
    }, 60_000);

    afterAll(() => fixture?.close());

    const pay = (ref: string) =>
      request(fixture.app.getHttpServer())
        .post('/payments')
        .set('Idempotency-Key', ref)
        .send({ ref })
        .timeout(5_000);
    const rows = async (ref: string) =>
      Number(
        (await fixture.admin.query('SELECT count(*) FROM payments WHERE ref = $1', [ref])).rows[0]
          .count,
      );

    it.each([
      ['control: no report holds the pool', false],
      ['a report holds the pool: the claim outlives the timeout', true],
    ] as const)(
      '%s: 201, one payment, replayed',
      async (name, busy) => {
        const ref = `adv31-tc-${adapter}-${busy}`;
        const report = busy
          ? request(fixture.app.getHttpServer())
              .get('/report')
              .then((r) => r.status)
          : Promise.resolve(200);
        if (busy) await new Promise((resolve) => setTimeout(resolve, 30));
        const first = await pay(ref);
        expect(await report).toBe(200);
        await new Promise((resolve) => setTimeout(resolve, 500));
        const retry = await pay(ref);
        if (process.env.ADV_DEBUG) console.log(name, first.status, first.body, retry.status);
        expect({ status: first.status, body: first.body as unknown }).toEqual({
          status: 201,
          body: { ref, status: 'captured' },
        });
        expect(await rows(ref)).toBe(1);
        expect({ status: retry.status, replayed: retry.headers['idempotent-replayed'] }).toEqual({
          status: 201,
          replayed: 'true',
        });
      },
      20_000,
    );
  },
);
