import {
  Body,
  type CallHandler,
  Controller,
  type ExecutionContext,
  Injectable,
  Module,
  type NestInterceptor,
  Post,
} from '@nestjs/common';
import { APP_INTERCEPTOR } from '@nestjs/core';
import { map, type Observable, retry, timeout } from 'rxjs';
import { type Pool } from 'pg';
import request from 'supertest';
import { ADAPTERS } from '../../support/bootstrap.js';
import { IdempotencyModule, Idempotent } from '../../../lib/index.js';
import { type PoolApp, startPoolApp } from '../../support/pool-app.js';

/**
 * Adversary 42a: lib/http/run-owned.ts:137-150 `settleDetachedWith` shares a detached run's
 * committed value with a run beside it (an app's `retry()` after its own outer `timeout()`)
 * whenever `context.finished` is unset: the later run answers the RAW handler value, which then
 * goes through the app's interceptors outside `@Idempotent()` again (the everyday global
 * response envelope `map(data => ({ data }))`) and reaches the client as `{"data":{...}}`. What
 * was stored is lib/http/settle-detached.ts:46-48 `renderResult(outcome.value, ...)`: the bare
 * value, without the envelope. The client's one answer and every replay of the key differ for
 * ever. (docs/guides/transactions.md:191 states that a LATE answer lacks the envelope; here the
 * client is told another answer than the stored one, on the same request.)
 *
 * App: Express and Fastify, the pool seam; two global interceptors (APP_INTERCEPTOR), the
 * resilience one `timeout(400), retry(1)` and the API's envelope `{ data }`; `POST /payments`
 * `@Idempotent()`, async: calls the PSP (50 ms, or 600 ms when slow), inserts a row, returns
 * `{ charged: true, ref }`.
 * What happens: the slow PSP: the timeout fires at 400 ms, the library detaches the run,
 * retry() re-runs the chain; the run beside waits for the detached one and, its value committed, gets `{ value }` (run-owned.ts:144-146) — the envelope wraps it:
 * 201 `{"data":{"charged":true,...}}`. The replay: 201 `{"charged":true,...}`.
 * Expected: the replay equals the client's answer byte for byte (or the run claims again and
 * replays the stored answer, as round 41 made it for `respond()`).
 * Control: the PSP within the timeout: first and replay both `{"data":{...}}`, one row.
 * Severity: critical (the stored answer differs from the client's first final answer, for ever).
 */
let pool: Pool;
let pspMs = 50;
const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

@Injectable()
class ResilienceInterceptor implements NestInterceptor {
  intercept(_context: ExecutionContext, next: CallHandler): Observable<unknown> {
    return next.handle().pipe(timeout(400), retry(1));
  }
}

@Injectable()
class EnvelopeInterceptor implements NestInterceptor {
  intercept(_context: ExecutionContext, next: CallHandler): Observable<unknown> {
    return next.handle().pipe(map((data: unknown) => ({ data })));
  }
}

@Controller()
class PaymentsController {
  @Post('payments')
  @Idempotent()
  async pay(@Body() body: { ref: string }) {
    await sleep(pspMs);
    await pool.query('INSERT INTO charges (ref) VALUES ($1)', [body.ref]);
    return { charged: true, ref: body.ref };
  }
}

@Module({
  imports: [IdempotencyModule.forRootAsync({ useFactory: () => ({ globalKeys: true, pool }) })],
  controllers: [PaymentsController],
  providers: [
    { provide: APP_INTERCEPTOR, useClass: ResilienceInterceptor },
    { provide: APP_INTERCEPTOR, useClass: EnvelopeInterceptor },
  ],
})
class PaymentsModule {}

describe.each(ADAPTERS)(
  'adversary 42a: outer timeout() then retry() with a global envelope, on %s',
  (adapter) => {
    let fixture: PoolApp;
    beforeAll(async () => {
      fixture = await startPoolApp(`adv42a_envelope_${adapter}`, {
        module: PaymentsModule,
        max: 4,
        adapter,
        usePool: (started) => (pool = started),
        setup: async (admin) => {
          await admin.query('CREATE TABLE charges (ref text NOT NULL)');
        },
      });
    }, 60_000);
    afterAll(async () => fixture?.close());

    const conversation = async (ref: string, ms: number) => {
      pspMs = ms;
      const post = () =>
        request(fixture.app.getHttpServer())
          .post('/payments')
          .set('Idempotency-Key', `adv42a-env-${ref}`)
          .send({ ref })
          .timeout(5000);
      const first = await post();
      await sleep(300);
      const replay = await post();
      const rows = await fixture.admin.query(
        'SELECT count(*)::int AS n FROM charges WHERE ref = $1',
        [ref],
      );
      return {
        first: [first.status, first.text],
        replay: [replay.status, replay.text],
        rows: rows.rows[0].n as number,
      };
    };

    it('control: the PSP within the timeout: the envelope answered and replayed', async () => {
      const ref = `fast-${adapter}`;
      const outcome = await conversation(ref, 50);
      const body = JSON.stringify({ data: { charged: true, ref } });
      expect(outcome).toEqual({ first: [201, body], replay: [201, body], rows: 1 });
    });

    // Fails today: first [201, '{"data":{...}}'], replay [201, '{"charged":true,...}'].
    it('a slow PSP cut by the timeout and retried: the client gets the stored answer', async () => {
      const outcome = await conversation(`slow-${adapter}`, 600);
      expect(outcome.rows).toBe(1);
      expect(outcome.first).toEqual(outcome.replay);
    });
  },
);
