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
import { type Observable, retry, timeout } from 'rxjs';
import { type Pool } from 'pg';
import request from 'supertest';
import { ADAPTERS } from '../../support/bootstrap.js';
import { IdempotencyModule, Idempotent, PhaseRunner, respond } from '../../../lib/index.js';
import { type PoolApp, startPoolApp } from '../../support/pool-app.js';

/**
 * Adversary 41a: a global resilience interceptor, `next.handle().pipe(timeout(400), retry(1))`
 * (the textbook "cut a slow request and try it once more"), over a phases route that answers a
 * decline with `respond(402, { error: 'card_declined' })` from `phases.finish()`
 * (docs/guides/phases.md rule 5). When the PSP is slow (600 ms: past the first try's timeout,
 * within the retry's), the CLIENT is answered 201 `{"error":"card_declined"}`, and every replay
 * of the key answers 402 `{"error":"card_declined"}`: the first final answer and the stored one
 * differ (a "success" status for a declined card, and a decline on replay).
 *
 * What happens: the timeout unsubscribes run 1 while its handler works: detached
 * (lib/http/run-owned.ts:494-500), the held response let through. retry(1) subscribes run 2,
 * which follows run 1 (lib/idempotency.interceptor.ts:262-293) and waits for its
 * `sharedOutcome()` (run-owned.ts:334). The handler settles; `settleDetachedWith`
 * (run-owned.ts:137-147) commits `context.finished` (the 402 PhaseResponse, settle-detached.ts:46-48)
 * as the key's answer, then hands run 2 `{ value: outcome.value, values }`: the handler's
 * RETURN VALUE, which `finish()` made the bare body (phase-runner.service.ts:199, `bodyOf`).
 * Run 2 emits it through the app's chain; run 1's hold lets it through as it is (detached,
 * run-owned.ts:167), and the adapter writes it with the route's 201.
 * Expected: the client's answer is the stored one (402, the same bytes), as for any answer.
 * Control: the PSP within the timeout (50 ms): the client gets 402, and so does the replay.
 * Severity: critical (the client's only final answer is not what the key stores: it is told
 * 201 for a declined payment, while every retry of it is told 402).
 */
let pool: Pool;
let pspMs = 50;
let charges = 0;
const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

@Injectable()
class ResilienceInterceptor implements NestInterceptor {
  intercept(_context: ExecutionContext, next: CallHandler): Observable<unknown> {
    return next.handle().pipe(timeout(400), retry(1));
  }
}

@Controller()
class PaymentsController {
  constructor(private readonly phases: PhaseRunner) {}

  @Post('payments')
  @Idempotent()
  async pay(@Body() body: { ref: string }) {
    const auth = await this.phases.call('psp_authorized', async ({ idempotencyKey }) => {
      charges += 1;
      await sleep(pspMs);
      return { declined: true, key: idempotencyKey.length };
    });
    return this.phases.finish(async () => {
      await pool.query('INSERT INTO declines (ref) VALUES ($1)', [body.ref]);
      return auth.declined ? respond(402, { error: 'card_declined' }) : { ok: true };
    });
  }
}

@Module({
  imports: [IdempotencyModule.forRootAsync({ useFactory: () => ({ globalKeys: true, pool }) })],
  controllers: [PaymentsController],
  providers: [{ provide: APP_INTERCEPTOR, useClass: ResilienceInterceptor }],
})
class PaymentsModule {}

describe.each(ADAPTERS)(
  'adversary 41a: outer timeout() then retry() over a respond(402), on %s',
  (adapter) => {
    let fixture: PoolApp;
    beforeAll(async () => {
      fixture = await startPoolApp(`adv41a_respond_${adapter}`, {
        module: PaymentsModule,
        max: 4,
        adapter,
        usePool: (started) => (pool = started),
        setup: async (admin) => {
          await admin.query('CREATE TABLE declines (ref text NOT NULL)');
        },
      });
    }, 60_000);
    afterAll(async () => fixture?.close());

    const conversation = async (ref: string, ms: number) => {
      pspMs = ms;
      charges = 0;
      const post = () =>
        request(fixture.app.getHttpServer())
          .post('/payments')
          .set('Idempotency-Key', `adv41a-${ref}`)
          .send({ ref })
          .timeout(5000);
      const first = await post();
      await sleep(300);
      const replay = await post();
      const rows = await fixture.admin.query(
        'SELECT count(*)::int AS n FROM declines WHERE ref = $1',
        [ref],
      );
      return {
        first: [first.status, first.text],
        replay: [replay.status, replay.text],
        charges,
        rows: rows.rows[0].n as number,
      };
    };

    it('control: the PSP within the timeout: 402 to the client, 402 replayed', async () => {
      const outcome = await conversation(`fast-${adapter}`, 50);
      expect(outcome).toEqual({
        first: [402, '{"error":"card_declined"}'],
        replay: [402, '{"error":"card_declined"}'],
        charges: 1,
        rows: 1,
      });
    });

    // Fails today: first [201, '{"error":"card_declined"}'], replay [402, ...].
    it('a slow PSP cut by the timeout and retried: the client gets the stored answer', async () => {
      const outcome = await conversation(`slow-${adapter}`, 600);
      expect(outcome.rows).toBe(1);
      expect(outcome.first).toEqual(outcome.replay);
    });
  },
);
