import {
  type CallHandler,
  Controller,
  type ExecutionContext,
  Injectable,
  Module,
  type NestInterceptor,
  Param,
  Post,
  UseInterceptors,
} from '@nestjs/common';
import { type Pool } from 'pg';
import { from, type Observable, retry, timeout } from 'rxjs';
import request from 'supertest';
import { IdempotencyModule, Idempotent } from '../../../lib/index.js';
import { ADAPTERS } from '../../support/bootstrap.js';
import { type PoolApp, startPoolApp } from '../../support/pool-app.js';

/**
 * Adversary 41a: round 40's refusal of a second call of the handler while "the try before may
 * still run" counts a try as running only while its NATIVE PROMISE is pending; any other
 * answer is taken as settled at once (lib/idempotent.decorator.ts:51-61 `noteSettled`: "an
 * Observable's work is cancelled with the subscription a retry replaces"). The everyday Nest
 * idiom `return from(this.service.create(dto))` answers an Observable over a Promise that has
 * started already: unsubscribing it cancels nothing. With the resilience idiom `timeout()` then
 * `retry()` inside `@Idempotent()`, the second call is let through while the first try's
 * service call is still running and has not written yet: both tries run in the request's one
 * transaction and both their rows commit with the key's one answer (40a's break, by another
 * door).
 *
 * App: Express and Fastify, the pool seam. `POST /payments/:way/:ref` with the app's
 * `@UseInterceptors(SlowCallRetry)` written above `@Idempotent()` (inside it:
 * `next.handle().pipe(timeout({ first: 150 }), retry({ count: 1 }))`). The service calls the
 * provider (200 ms the first time, 120 ms after), then inserts its ledger row. The `rx` route's
 * handler is a plain method `return from(pay(ref))`; the control route's is the same service
 * call returned as its Promise.
 * What happens: try 1's answer is an Observable: `noteSettled` marks it settled at once
 * (decorator.ts:52-55). At 150 ms the timeout unsubscribes it (the Promise goes on) and retry()
 * calls the handler again: `again` is true, but `lastTry.settled` is true and the transaction
 * has not begun (try 1 is still at its provider), so decorator.ts:93 lets it through. Try 1
 * inserts at ~200 ms, try 2 at ~270 ms, in the same context and transaction; try 2's value is
 * written and lib/http/run-owned.ts commits both rows with it.
 * Expected (docs/guides/transactions.md:195; docs/reference/problems.md `handler_retried_inside`:
 * "called the handler again while its try before still ran (a timeout() gave up on it)"):
 * refused, nothing kept, or one try's row; never both.
 * Control: the same service call answered as a Promise (`promise` route): refused
 * (500 handler_retried_inside), nothing kept.
 * Severity: critical (a double effect committed with the key's one answer).
 */
let pool: Pool;
const calls: Record<string, number> = {};
const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

@Injectable()
class SlowCallRetry implements NestInterceptor {
  intercept(_context: ExecutionContext, next: CallHandler): Observable<unknown> {
    return next.handle().pipe(timeout({ first: 150 }), retry({ count: 1 }));
  }
}

async function pay(ref: string): Promise<unknown> {
  calls[ref] = (calls[ref] ?? 0) + 1;
  const attempt = calls[ref];
  // The provider: slower the first time (a cold connection).
  await sleep(attempt === 1 ? 200 : 120);
  await pool.query('INSERT INTO ledger (ref, attempt) VALUES ($1, $2)', [ref, attempt]);
  return { ref, attempt };
}

@Controller('payments')
class PaymentsController {
  @Post('rx/:ref')
  @UseInterceptors(SlowCallRetry)
  @Idempotent()
  rx(@Param('ref') ref: string): Observable<unknown> {
    return from(pay(ref));
  }

  @Post('promise/:ref')
  @UseInterceptors(SlowCallRetry)
  @Idempotent()
  promise(@Param('ref') ref: string): Promise<unknown> {
    return pay(ref);
  }
}

describe.each(ADAPTERS)(
  'adversary 41a: timeout() then retry() inside @Idempotent() over from(promise), on %s',
  (adapter) => {
    let fixture: PoolApp;

    beforeAll(async () => {
      @Module({
        imports: [
          IdempotencyModule.forRootAsync({ useFactory: () => ({ globalKeys: true, pool }) }),
        ],
        controllers: [PaymentsController],
      })
      class PaymentsModule {}
      fixture = await startPoolApp(`adv41a_frompromise_${adapter}`, {
        module: PaymentsModule,
        adapter,
        max: 4,
        usePool: (started) => (pool = started),
        setup: async (owner) => {
          await owner.query(
            'CREATE TABLE ledger (id serial PRIMARY KEY, ref text NOT NULL, attempt int NOT NULL)',
          );
        },
      });
    }, 60_000);

    afterAll(async () => {
      await fixture?.close();
    });

    async function run(way: 'rx' | 'promise') {
      const ref = `${adapter}-${way}`;
      const first = await request(fixture.app.getHttpServer())
        .post(`/payments/${way}/${ref}`)
        .set('Idempotency-Key', ref)
        .send({});
      // Everything settled: the timed-out try's provider call is long over.
      await sleep(600);
      const rows = await fixture.admin.query<{ attempt: number }>(
        'SELECT attempt FROM ledger WHERE ref = $1 ORDER BY id',
        [ref],
      );
      return { first: first.status, kept: rows.rows.map((row) => row.attempt) };
    }

    it('control: the service call answered as a Promise: refused, nothing kept', async () => {
      const seen = await run('promise');
      expect(seen.kept.length).toBeLessThanOrEqual(1);
    });

    // Fails today: both tries' rows committed, [1, 2], with the key's 201.
    it('the same call answered as from(promise): never both tries kept', async () => {
      const seen = await run('rx');
      const kept = seen.kept.length <= 1 ? 'at most one' : seen.kept;
      expect({ ...seen, kept }).toEqual({ ...seen, kept: 'at most one' });
    });
  },
);
