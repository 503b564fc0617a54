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
import { type Observable, share } from 'rxjs';
import { type Pool } from 'pg';
import request from 'supertest';
import { IdempotencyModule, Idempotent } from '../../../lib/index.js';
import { type PoolApp, startPoolApp } from '../../support/pool-app.js';

/**
 * Adversary, round 28: an app interceptor outside `@Idempotent()` that subscribes to
 * `next.handle()` twice at once (the common "audit the result on the side" mistake):
 *
 *   const result$ = next.handle();
 *   result$.subscribe({ next: (v) => audit.log(v), error: (e) => audit.fail(e) });
 *   return result$;
 *
 * Without the library the handler runs twice (two rows) and the client gets its 201.
 *
 * What happens under `@Idempotent()` (Express, pool seam): the audit subscription claims the
 * key and runs the handler; the returned subscription is a second run of the same request.
 * lib/http/earlier-run.ts (earlierRunStepsAside) asks the first run to step aside, but
 * lib/http/run-owned.ts:245-246 (holdRun) answers `undefined` while its handler still works,
 * so the second run is "another claimant" and its 409 `key_in_progress` is what the adapter
 * writes on the response. A handler quicker than that second claim (one INSERT, as here) has
 * settled by then, so lib/http/run-owned.ts:108 (`!settled && result === undefined`: an
 * answer from outside) does not apply, and the first run takes that written 409 as its
 * answer: run-owned.ts:144-148 lets only a *retry-kind* library error written on the
 * response through unstored (key_in_progress is not one), and :176-177 commits it
 * (`commitAnswer(..., written, ...)`) together with the handler's row (with a handler that
 * takes 30 ms, the 409 comes while it runs, goes out unstored, and the retry gets the 201:
 * only the quick handler is broken). It is a race on the default route (lost in about 4 runs
 * of 5 here); on a `oneCommit` route, whose second claim waits on the first's uncommitted
 * claim row until the handler has settled, it fails every time (Express and Fastify alike).
 * Every retry of the
 * key is then REPLAYED the 409 "still being processed; retry later" (Idempotent-Replayed:
 * true), for as long as the key is kept: the row exists, the client is never told.
 *
 * What is expected: one execution (that part holds: one row), and the answer stored for the
 * key is the handler's 201, never the library's own 409 for the request's other run (or, at
 * worst, nothing stored and the key given back, so that the retry runs it).
 *
 * Control: the same app whose interceptor shares the one subscription (`share()`): 201,
 * replayed as 201.
 *
 * Severity: high (a wrong replay: an effect committed, its key answering "in progress"
 * forever).
 */
let pool: Pool;
let sideSubscription = true;
const handlerMs = Number(process.env.ADV_MS ?? 0);

@Injectable()
class AuditInterceptor implements NestInterceptor {
  private readonly logger = new Logger('audit');
  intercept(_context: ExecutionContext, next: CallHandler): Observable<unknown> {
    const result$ = sideSubscription ? next.handle() : next.handle().pipe(share());
    result$.subscribe({
      next: (value) => this.logger.debug(`answered ${JSON.stringify(value)}`),
      error: (error: unknown) => this.logger.debug(`failed ${String(error)}`),
    });
    return result$;
  }
}

@Controller()
class PaymentsController {
  @Post('payments')
  @Idempotent()
  async pay(@Body() body: { ref: string }) {
    await pool.query('INSERT INTO payments (ref) VALUES ($1)', [body.ref]);
    if (handlerMs) await new Promise((resolve) => setTimeout(resolve, handlerMs));
    return { ref: body.ref, status: 'captured' };
  }

  /** The same, its claim committed with the work. */
  @Post('payments-one-commit')
  @Idempotent({ oneCommit: true })
  payOneCommit(@Body() body: { ref: string }) {
    return this.pay(body);
  }
}

@Module({
  imports: [
    IdempotencyModule.forRootAsync({
      useFactory: () => ({ globalKeys: true, pool, leaseMs: 2_000 }),
    }),
  ],
  controllers: [PaymentsController],
  providers: [{ provide: APP_INTERCEPTOR, useClass: AuditInterceptor }],
})
class PaymentsModule {}

describe('adversary 28: an interceptor subscribing twice stores the 409 of its second run', () => {
  let fixture: PoolApp;

  beforeAll(async () => {
    fixture = await startPoolApp('adv28_double_subscribe', {
      module: PaymentsModule,
      max: 4,
      usePool: (started) => (pool = started),
      setup: async (admin) => {
        await admin.query('CREATE TABLE payments (id serial PRIMARY KEY, ref text NOT NULL)');
      },
    });
  }, 60_000);

  afterAll(() => fixture?.close());

  const pay = (ref: string, path = '/payments') =>
    request(fixture.app.getHttpServer()).post(path).set('Idempotency-Key', ref).send({ ref });
  const rows = async (ref: string) =>
    Number(
      (await fixture.admin.query('SELECT count(*) FROM payments WHERE ref = $1', [ref])).rows[0]
        .count,
    );

  it.each([
    ['control: the interceptor shares one subscription', false, 'adv28-shared', '/payments'],
    ['the interceptor subscribes twice (audit on the side)', true, 'adv28-twice', '/payments'],
    ['the same on a oneCommit route', true, 'adv28-twice-one', '/payments-one-commit'],
  ] as const)(
    '%s: one payment, and its retry is answered the payment',
    async (_name, twice, ref, path) => {
      sideSubscription = twice;
      await pay(ref, path);
      // Everything settled: the handler and its commit.
      await new Promise((resolve) => setTimeout(resolve, 1_000));
      const retry = await pay(ref, path);
      const stored = (
        await fixture.admin.query(
          'SELECT state, response_code FROM idempotency_keys WHERE key = $1',
          [ref],
        )
      ).rows[0] as { state: string; response_code: number | null } | undefined;
      if (process.env.ADV_DEBUG) console.log(ref, stored, retry.headers['idempotent-replayed']);
      expect(await rows(ref)).toBe(1);
      // Received with `twice`: 409 {"code":"key_in_progress",...}, Idempotent-Replayed: true,
      // and the key's row { state: 'done', response_code: 409 }.
      expect({ status: retry.status, body: retry.body as unknown, stored }).toEqual({
        status: 201,
        body: { ref, status: 'captured' },
        stored: { state: 'done', response_code: 201 },
      });
    },
    20_000,
  );
});
