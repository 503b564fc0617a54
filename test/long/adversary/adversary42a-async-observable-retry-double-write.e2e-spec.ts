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
 * Adversary 42a: round 41's fix says "a handler that answers an Observable is never retried
 * inside @Idempotent()": lib/idempotent.decorator.ts:55-74 `noteSettled` wraps an Observable
 * answer so it never counts as settled. But it looks only at what the method RETURNS: an
 * `async` handler returns a native Promise (that resolves to the Observable), and
 * decorator.ts:66-71 counts that try as settled as soon as the Promise resolves — i.e. at
 * once, while the work behind the Observable (a Promise inside `from()`) has only started.
 * The answer is never wrapped either, so `answering` stays 0.
 *
 * App: Express and Fastify, the pool seam. The everyday Nest shape "await a lookup, then
 * return the provider's Observable" (`async pay() { await this.accounts.find(); return
 * from(this.provider.charge()) }`, as with @nestjs/axios' HttpService), with the app's
 * `@UseInterceptors(SlowCallRetry)` above `@Idempotent()` (inside it:
 * `next.handle().pipe(timeout({ first: 150 }), retry({ count: 1 }))`) — 41a's app, the handler
 * made `async`. The service calls the provider (200 ms the first time, 120 ms after), then
 * inserts its ledger row.
 * What happens: try 1 returns a Promise; it resolves to the Observable at once and
 * `thisTry.settled = true` (decorator.ts:66-71). At 150 ms the timeout unsubscribes (the
 * Promise goes on) and retry() calls the handler again: `again` is true, `answering` 0,
 * `lastTry.settled` true and the transaction not begun (try 1 is still at its provider), so
 * decorator.ts:110 lets it through. Both tries insert in the one request transaction, both rows
 * commit with the key's one answer.
 * Expected (docs/guides/transactions.md:195, docs/reference/problems.md:25): refused (500
 * handler_retried_inside), nothing kept — as for the same handler without `async` (41a's fix).
 * Control: the same handler, not `async` (`sync` route): refused, at most one row kept.
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

async function findAccount(ref: string): Promise<string> {
  await Promise.resolve();
  return ref;
}

@Controller('payments')
class PaymentsController {
  @Post('async/:ref')
  @UseInterceptors(SlowCallRetry)
  @Idempotent()
  async asyncPay(@Param('ref') ref: string): Promise<Observable<unknown>> {
    const account = await findAccount(ref);
    return from(pay(account));
  }

  @Post('sync/:ref')
  @UseInterceptors(SlowCallRetry)
  @Idempotent()
  syncPay(@Param('ref') ref: string): Observable<unknown> {
    return from(pay(ref));
  }
}

describe.each(ADAPTERS)(
  'adversary 42a: timeout() then retry() inside @Idempotent() over an async handler answering from(promise), on %s',
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
      fixture = await startPoolApp(`adv42a_asyncobs_${adapter}`, {
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

    async function run(way: 'async' | 'sync') {
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

    it('control: the same handler, not async: refused, at most one row kept', async () => {
      const seen = await run('sync');
      expect(seen.kept.length).toBeLessThanOrEqual(1);
    });

    // Fails today: both tries' rows committed, [1, 2], with the key's 201.
    it('the handler made async: never both tries kept', async () => {
      const seen = await run('async');
      const kept = seen.kept.length <= 1 ? 'at most one' : seen.kept;
      expect({ ...seen, kept }).toEqual({ ...seen, kept: 'at most one' });
    });
  },
);
