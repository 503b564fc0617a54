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
import { type Observable, retry, timeout } from 'rxjs';
import request from 'supertest';
import { IdempotencyModule, Idempotent } from '../../../lib/index.js';
import { ADAPTERS } from '../../support/bootstrap.js';
import { type PoolApp, startPoolApp } from '../../support/pool-app.js';

/**
 * Adversary 40a: round 39b refuses a second call of the handler inside one run only once the
 * first call has written. The resilience idiom `timeout()` then `retry()` (a slow try is cut
 * and tried again) calls the handler again while the first try, which a timeout cannot stop
 * (a Promise), is still running and has not written YET: the second call is let through, the
 * two tries run at once in the request's one transaction, and both their writes commit with
 * the second try's answer. One key, one answer, two ledger rows.
 *
 * App: Express and Fastify. `POST /payments/inside/:ref` with the app's resilience interceptor
 * `@UseInterceptors(SlowCallRetry)` written above `@Idempotent()` (inside it:
 * `next.handle().pipe(timeout({ first: 150 }), retry({ count: 1 }))`). The handler calls the
 * provider (300 ms the first time, 20 ms after), then inserts its ledger row.
 * What happens: at 150 ms the timeout unsubscribes and `retry` resubscribes; Nest calls the
 * handler again. lib/idempotent.decorator.ts:73 refuses only when `transaction.begun`; the first
 * try is still awaiting its provider and has not touched the transaction, so the second call
 * goes through (it merely replaces `handlerReturned`, :84). The second try inserts at ~170 ms;
 * the first one, still in the same async context (same IdempotencyContext and transaction),
 * inserts at ~300 ms; the second try's value is written and lib/http/run-owned.ts commits the
 * transaction with both rows (the first try's insert lands before the commit: the held answer
 * commits after the adapter writes it). Seen on the pool seam.
 * Expected (docs/guides/transactions.md:195 and the decorator's own words: "the attempt that
 * runs is the one a timeout leaves going on"): one effect under the key: the second call
 * refused while a try of the same run is still going on (or the timed-out try's later writes
 * refused), never both tries' writes committed with one answer.
 * Control: the same interceptor written below `@Idempotent()` (outside it), on
 * `/payments/outside/:ref`: the timed-out run goes on detached and commits alone, the retry
 * replays it (the client's retry gets 201); one ledger row.
 * Severity: critical (a double effect committed with the key's answer).
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
  // The provider: slow the first time.
  await sleep(attempt === 1 ? 300 : 20);
  await pool.query('INSERT INTO ledger (ref, attempt) VALUES ($1, $2)', [ref, attempt]);
  return { ref, attempt };
}

@Controller('payments')
class PaymentsController {
  @Post('inside/:ref')
  @UseInterceptors(SlowCallRetry)
  @Idempotent()
  inside(@Param('ref') ref: string): Promise<unknown> {
    return pay(ref);
  }

  @Post('outside/:ref')
  @Idempotent()
  @UseInterceptors(SlowCallRetry)
  outside(@Param('ref') ref: string): Promise<unknown> {
    return pay(ref);
  }
}

describe.each(ADAPTERS)(
  'adversary 40a: timeout() then retry() inside @Idempotent(), on %s',
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
      fixture = await startPoolApp(`adv40a_timeoutretry_${adapter}`, {
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

    async function run(way: 'inside' | 'outside') {
      const ref = `${adapter}-${way}`;
      const first = await request(fixture.app.getHttpServer())
        .post(`/payments/${way}/${ref}`)
        .set('Idempotency-Key', ref)
        .send({});
      // Everything settled: the timed-out try's provider call is long over.
      await sleep(800);
      const again = await request(fixture.app.getHttpServer())
        .post(`/payments/${way}/${ref}`)
        .set('Idempotency-Key', ref)
        .send({});
      const rows = await fixture.admin.query<{ attempt: number }>(
        'SELECT attempt FROM ledger WHERE ref = $1 ORDER BY id',
        [ref],
      );
      return {
        first: first.status,
        again: again.status,
        kept: rows.rows.map((row) => row.attempt),
      };
    }

    it('control: the timeout and retry outside @Idempotent(): one ledger row', async () => {
      const seen = await run('outside');
      expect(seen.kept).toHaveLength(1);
      // (Its first answer is the retry's own timeout, a 500: the documented outer-timeout answer.)
      expect(seen.again).toBe(201);
    });

    it('inside @Idempotent(): one ledger row under the key, never both tries', async () => {
      const seen = await run('inside');
      // Refused (nothing kept) or one try's effect; never both.
      // (Seen: both tries' rows, `[2, 1]`, committed with the key's one answer.)
      const kept = seen.kept.length <= 1 ? 'at most one' : seen.kept;
      expect({ ...seen, kept }).toEqual({ ...seen, kept: 'at most one' });
    });
  },
);
