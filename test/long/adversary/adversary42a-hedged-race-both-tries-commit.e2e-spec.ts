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
import { from, type Observable, race, switchMap, timer } from 'rxjs';
import request from 'supertest';
import { IdempotencyModule, Idempotent } from '../../../lib/index.js';
import { ADAPTERS } from '../../support/bootstrap.js';
import { type PoolApp, startPoolApp } from '../../support/pool-app.js';

/**
 * Adversary 42a: round 41's rule "a handler that answers an Observable is never retried inside
 * @Idempotent()" lets a second call of the handler through as "its own call" whenever it comes
 * while the first try's Observable is still subscribed (lib/idempotent.decorator.ts:107-111:
 * `again` needs `lastTry.answering === 0`; lib/own-handler-call.ts:23-25 then says not own, so
 * no try is recorded and nothing is checked). That exemption is meant for recursion from the
 * handler's own stream (a paged import), but it cannot tell that from an interceptor that
 * subscribes `next.handle()` a second time while the first is pending: the hedged-request idiom
 * `race(next.handle(), timer(150).pipe(switchMap(() => next.handle())))` ("tail at scale":
 * send a backup try when the first is slow, keep whichever answers first).
 *
 * App: Express and Fastify, the pool seam. `POST /payments/:way/:ref` with the app's
 * `@UseInterceptors(HedgeSlowCall)` above `@Idempotent()` (inside it). The handler returns
 * `from(pay(ref))`: the provider call (300 ms the first time, 60 ms after), then a ledger
 * insert.
 * What happens: try 1 is subscribed (`answering` 1, decorator.ts:57-58); at 150 ms the hedge
 * calls the handler again: `again` is false (answering 1), the call is not refused
 * (decorator.ts:110), it runs in the same request and transaction. Try 2 answers first (~210
 * ms), race() drops try 1's subscription, but its Promise goes on and inserts too: both rows are
 * kept ([2, 1]) under the key's one 201.
 * Expected (docs/guides/transactions.md:195, docs/reference/problems.md:25 "a handler that
 * answers an Observable is never retried inside"): refused (500 handler_retried_inside),
 * nothing or one try kept; never both.
 * Control: the same hedge over the handler returning the Promise (`promise` route): refused,
 * at most one row kept.
 * Severity: critical (a double effect stored under one key's answer).
 */
let pool: Pool;
const calls: Record<string, number> = {};
const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

@Injectable()
class HedgeSlowCall implements NestInterceptor {
  intercept(_context: ExecutionContext, next: CallHandler): Observable<unknown> {
    // A backup try when the first is slow; whichever answers first wins.
    return race(next.handle(), timer(150).pipe(switchMap(() => next.handle())));
  }
}

async function pay(ref: string): Promise<unknown> {
  calls[ref] = (calls[ref] ?? 0) + 1;
  const attempt = calls[ref];
  // The provider: slower the first time (a cold connection).
  await sleep(attempt === 1 ? 300 : 60);
  await pool.query('INSERT INTO ledger (ref, attempt) VALUES ($1, $2)', [ref, attempt]);
  return { ref, attempt };
}

@Controller('payments')
class PaymentsController {
  @Post('rx/:ref')
  @UseInterceptors(HedgeSlowCall)
  @Idempotent()
  rx(@Param('ref') ref: string): Observable<unknown> {
    return from(pay(ref));
  }

  @Post('promise/:ref')
  @UseInterceptors(HedgeSlowCall)
  @Idempotent()
  promise(@Param('ref') ref: string): Promise<unknown> {
    return pay(ref);
  }
}

describe.each(ADAPTERS)(
  'adversary 42a: a hedged race() inside @Idempotent() over from(promise), on %s',
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
      fixture = await startPoolApp(`adv42a_hedge_${adapter}`, {
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
      await sleep(600);
      const rows = await fixture.admin.query<{ attempt: number }>(
        'SELECT attempt FROM ledger WHERE ref = $1 ORDER BY id',
        [ref],
      );
      return { first: first.status, kept: rows.rows.map((row) => row.attempt) };
    }

    it('control: the hedge over the handler answering its Promise: at most one row kept', async () => {
      const seen = await run('promise');
      expect(seen.kept.length).toBeLessThanOrEqual(1);
    });

    // Fails today: both tries' rows committed, [1, 2], with the key's 201.
    it('the hedge over from(promise): never both tries kept', async () => {
      const seen = await run('rx');
      const kept = seen.kept.length <= 1 ? 'at most one' : seen.kept;
      expect({ ...seen, kept }).toEqual({ ...seen, kept: 'at most one' });
    });
  },
);
