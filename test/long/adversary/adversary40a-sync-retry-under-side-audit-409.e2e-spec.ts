import {
  Body,
  type CallHandler,
  Controller,
  type ExecutionContext,
  Injectable,
  Module,
  type NestInterceptor,
  Post,
  ServiceUnavailableException,
  UseInterceptors,
} from '@nestjs/common';
import { APP_INTERCEPTOR } from '@nestjs/core';
import { type Observable, retry } from 'rxjs';
import { type Pool } from 'pg';
import request from 'supertest';
import { IdempotencyModule, Idempotent } from '../../../lib/index.js';
import { ADAPTERS } from '../../support/bootstrap.js';
import { type PoolApp, startPoolApp } from '../../support/pool-app.js';

/**
 * Adversary 40a: round 39's "which later run is the app's retry" (lib/http/earlier-run.ts
 * `retryTarget`, lib/http/end-of-chain.ts `resubscribedFrom`) with the plainest retry of all,
 * `retry(1)` (no delay: it resubscribes synchronously inside the error), on the controller,
 * under the supported global audit "on the side" (`const r$ = next.handle(); r$.subscribe(log);
 * return r$;`, round 33's and 39a's idiom). The client's own request is answered 409
 * key_in_progress ("still being processed") for a request that is its own and that succeeded:
 * the key stores 201 with the payment, which the client never saw. Without the audit (or
 * without the library) the client is answered 201.
 *
 * App: Express and Fastify. Global `AuditInterceptor` (APP_INTERCEPTOR, at once, above);
 * `@UseInterceptors(RetryInterceptor)` on the controller: `next.handle().pipe(retry(1))`.
 * `POST /payments` (`@Idempotent()`) inserts its row, then asks the provider: 503 the first
 * time.
 * Seen (both adapters): first 409 key_in_progress, calls 2, one row, the key `done 201`, the
 * client's retry replays 201. With `retry({ count: 1, delay })` (39a's file) it holds.
 * What happens (our reading of the runs): the audit's subscription is run 1 (owner), the returned one run 2 (joined).
 * The 503 goes down run 1's chain first (lib/http/run-owned.ts:434 `run.handOn`): its retry(1)
 * resubscribes at once (run 3), before run 2 was told the error, so `retryTarget`'s carriers
 * (earlier-run.ts:205, joined runs that `handedOn`) are run 1 alone: every one retried, the key
 * is given back to run 3, the AUDIT's retry, which runs the handler again and pays. Run 2 is
 * then told the 503 (run 1's `failure()`), its own retry(1) resubscribes (run 4), which is a
 * retry of run 2 whose owner's key went to run 3; run 4 meets the key held by run 3 and
 * the library's 409 key_in_progress is what the client gets (interceptor claimAfter/claimAndRun
 * :250-261, 217-219), while run 3 commits 201 with the row.
 * Expected: the client's request is answered what its handler came to, as without the audit:
 * 201 (the retry's), replayed after; one row. Never a 409 "in progress" for its own request,
 * an answer that is neither the key's nor the first error.
 * Control: the same app without the global audit: 201, one row, replay 201.
 * Severity: medium (a wrong answer for the key's first request, retryable: the client's retry
 * replays the 201; no double effect).
 */
let pool: Pool;
let calls = 0;
let outages = 0;
const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

@Injectable()
class RetryInterceptor implements NestInterceptor {
  intercept(_context: ExecutionContext, next: CallHandler): Observable<unknown> {
    return next.handle().pipe(retry(1));
  }
}

/** Audits every request on the side. */
@Injectable()
class AuditInterceptor implements NestInterceptor {
  intercept(_context: ExecutionContext, next: CallHandler): Observable<unknown> {
    const result$ = next.handle();
    result$.subscribe({ next: () => undefined, error: () => undefined });
    return result$;
  }
}

@Controller()
@UseInterceptors(RetryInterceptor)
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
      throw new ServiceUnavailableException('provider unavailable');
    }
    return { ref: body.ref, id: rows[0].id };
  }
}

const imports = [
  IdempotencyModule.forRootAsync({ useFactory: () => ({ globalKeys: true, pool }) }),
];

@Module({
  imports,
  controllers: [PaymentsController],
  providers: [{ provide: APP_INTERCEPTOR, useClass: AuditInterceptor }],
})
class AuditedModule {}

@Module({ imports, controllers: [PaymentsController] })
class PlainModule {}

describe.each(ADAPTERS)('adversary 40a: retry(1) under a side audit, on %s', (adapter) => {
  describe.each([
    ['control: no audit', 'plain', PlainModule],
    ['the global side audit', 'audited', AuditedModule],
  ] as const)('%s', (_name, label, module) => {
    let fixture: PoolApp;

    beforeAll(async () => {
      fixture = await startPoolApp(`adv40a_syncretry_${label}_${adapter}`, {
        module,
        adapter,
        max: 4,
        usePool: (started) => (pool = started),
        setup: async (admin) => {
          await admin.query('CREATE TABLE payments (id serial PRIMARY KEY, ref text NOT NULL)');
        },
      });
    }, 60_000);

    afterAll(async () => {
      await fixture?.close();
    });

    it('the client is answered what the key stores (the audit’s retry told the error), the handler once', async () => {
      const ref = `${label}-${adapter}`;
      const post = () =>
        request(fixture.app.getHttpServer())
          .post('/payments')
          .set('Idempotency-Key', ref)
          .send({ ref })
          .timeout(5000);
      calls = 0;
      outages = 1;
      const first = await post();
      await sleep(300);
      const rows = await fixture.admin.query<{ id: number }>(
        'SELECT id FROM payments WHERE ref = $1',
        [ref],
      );
      const again = await post();
      // Fixed on the safe side of the stated rule (docs/guides/transactions.md): the client's
      // run had joined the audit's try and was still to be told its error, so the audit's own
      // retry no longer gets the key back (the client answered 409 while 201 was stored); it
      // is told the error, and so is the client's retry, as after any audit that carried the
      // error on. The client's answer and the stored one are the same; the handler ran once.
      expect({
        first: first.status,
        firstCode: (first.body as { code?: string }).code,
        calls,
        rows: rows.rows.length,
        again: again.status,
      }).toEqual(
        label === 'plain'
          ? { first: 201, firstCode: undefined, calls: 2, rows: 1, again: 201 }
          : { first: 503, firstCode: undefined, calls: 1, rows: 0, again: 503 },
      );
      expect(first.body).toEqual(again.body);
    });

    // Stated limit (see above): the retry paying here would need the library to tell the
    // audit's subscriber from Nest's. Skipped with its reason; the case above is what holds.
    it.skip('the client is answered 201 (the retry paid), the key replays it, one row', () => {
      expect('the retry paid').toBe('stated limit');
    });
  });
});
