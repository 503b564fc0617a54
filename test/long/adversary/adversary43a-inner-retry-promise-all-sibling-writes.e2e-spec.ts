import {
  type CallHandler,
  Controller,
  type ExecutionContext,
  Injectable,
  Module,
  type NestInterceptor,
  Param,
  Post,
  ServiceUnavailableException,
  UseInterceptors,
} from '@nestjs/common';
import { type Pool } from 'pg';
import { type Observable, retry } from 'rxjs';
import request from 'supertest';
import { IdempotencyModule, Idempotent } from '../../../lib/index.js';
import { ADAPTERS } from '../../support/bootstrap.js';
import { type PoolApp, startPoolApp } from '../../support/pool-app.js';

/**
 * Adversary 43a: round 42's rule lets a retry inside `@Idempotent()` run the handler again once
 * "the earlier try settled" and the request's transaction has no statements yet
 * (lib/idempotent.decorator.ts:99). A native Promise counts as settled when it settles
 * (decorator.ts:55-62 `noteSettled`). But a handler's Promise settles as soon as it rejects,
 * and the work it started does not stop with it: the everyday `await Promise.all([...])` of
 * two independent steps rejects at the first failure and leaves the other step running. If that
 * step has not reached the database yet, the retry is let through, and the orphaned step of the
 * failed try then writes into the same request transaction as the retry's own writes.
 *
 * App: Express and Fastify, the pool seam. `POST /orders/:way/:ref` with the app's resilience
 * interceptor `@UseInterceptors(RetryBlip)` written above `@Idempotent()` (inside it:
 * `next.handle().pipe(retry({ count: 1, delay: 20 }))`, the idiom the guide documents as "the
 * retry's answer when the failed try had settled and sent no statement"). The handler places
 * the order and authorizes the payment at once: `await Promise.all([place(ref),
 * authorize(ref)])`. `place` reserves stock (an HTTP call, 100 ms) then inserts the order row;
 * `authorize` answers a 503 blip after 10 ms the first time, then succeeds.
 * What happens: at 10 ms try 1's Promise rejects (Promise.all) and `noteSettled` marks it settled
 * (decorator.ts:60-62); nothing has been sent in the transaction (place is still at its stock
 * call). retry() calls the handler again at ~30 ms: `again` is true, `lastTry.settled` is true and
 * `transaction.begun` is false, so decorator.ts:99 lets it through. Try 1's `place` inserts at
 * ~100 ms in the request's context and transaction (pool-join.ts joins it), try 2's at ~130 ms;
 * try 2's value is written and lib/http/run-owned.ts commits both rows with the key's one 201
 * (a statement arriving after the commit would run apart anyway:
 * request-transaction.ts:757-767 `apart`, "runs apart if the request committed").
 * Expected (docs/guides/transactions.md:195: both tries share the transaction "where the failed
 * try's work cannot be undone apart"; "refused ... while the try before still runs"): one order
 * row under the key, or a refusal (500 handler_retried_inside) with nothing kept; never both.
 * Control: the same handler with its two steps awaited one after the other (`sequential`):
 * the failed try stopped at the blip, the retry places the order once; one row, 201. (And the
 * same Promise.all with the retry outside `@Idempotent()` rolls the failed run's transaction
 * back, so its orphaned insert is refused: see the `outside` case.)
 * Severity: critical (a double effect committed with the key's one answer).
 */
let pool: Pool;
const calls: Record<string, number> = {};
const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

/** The app's resilience interceptor: one retry after a blip. */
@Injectable()
class RetryBlip implements NestInterceptor {
  intercept(_context: ExecutionContext, next: CallHandler): Observable<unknown> {
    return next.handle().pipe(retry({ count: 1, delay: 20 }));
  }
}

async function place(ref: string, attempt: number): Promise<{ id: number }> {
  // The stock reservation (an HTTP call), then the order row.
  await sleep(100);
  const inserted = await pool.query<{ id: number }>(
    'INSERT INTO orders (ref, attempt) VALUES ($1, $2) RETURNING id',
    [ref, attempt],
  );
  return inserted.rows[0]!;
}

async function authorize(attempt: number): Promise<void> {
  await sleep(10);
  // The provider's blip, the first time only.
  if (attempt === 1) throw new ServiceUnavailableException('provider blip');
}

function attemptOf(ref: string): number {
  calls[ref] = (calls[ref] ?? 0) + 1;
  return calls[ref];
}

@Controller('orders')
class OrdersController {
  @Post('parallel/:ref')
  @UseInterceptors(RetryBlip)
  @Idempotent()
  async parallel(@Param('ref') ref: string): Promise<unknown> {
    const attempt = attemptOf(ref);
    const [order] = await Promise.all([place(ref, attempt), authorize(attempt)]);
    return { ref, attempt, order: order.id };
  }

  @Post('sequential/:ref')
  @UseInterceptors(RetryBlip)
  @Idempotent()
  async sequential(@Param('ref') ref: string): Promise<unknown> {
    const attempt = attemptOf(ref);
    await authorize(attempt);
    const order = await place(ref, attempt);
    return { ref, attempt, order: order.id };
  }

  @Post('outside/:ref')
  @Idempotent()
  @UseInterceptors(RetryBlip)
  async outside(@Param('ref') ref: string): Promise<unknown> {
    const attempt = attemptOf(ref);
    const [order] = await Promise.all([place(ref, attempt), authorize(attempt)]);
    return { ref, attempt, order: order.id };
  }
}

describe.each(ADAPTERS)(
  'adversary 43a: retry() inside @Idempotent() over a Promise.all whose sibling still runs, on %s',
  (adapter) => {
    let fixture: PoolApp;

    beforeAll(async () => {
      @Module({
        imports: [
          IdempotencyModule.forRootAsync({ useFactory: () => ({ globalKeys: true, pool }) }),
        ],
        controllers: [OrdersController],
      })
      class OrdersModule {}
      fixture = await startPoolApp(`adv43a_promiseall_${adapter}`, {
        module: OrdersModule,
        adapter,
        max: 4,
        usePool: (started) => (pool = started),
        setup: async (owner) => {
          await owner.query(
            'CREATE TABLE orders (id serial PRIMARY KEY, ref text NOT NULL, attempt int NOT NULL)',
          );
        },
      });
    }, 60_000);

    afterAll(async () => {
      await fixture?.close();
    });

    async function run(way: 'parallel' | 'sequential' | 'outside') {
      const ref = `${adapter}-${way}`;
      const first = await request(fixture.app.getHttpServer())
        .post(`/orders/${way}/${ref}`)
        .set('Idempotency-Key', ref)
        .send({});
      // Everything settled: the failed try's orphaned step is long over.
      await sleep(500);
      const rows = await fixture.admin.query<{ attempt: number }>(
        'SELECT attempt FROM orders WHERE ref = $1 ORDER BY id',
        [ref],
      );
      return { first: first.status, kept: rows.rows.map((row) => row.attempt) };
    }

    it('control: the two steps awaited in turn: the retry places the order once', async () => {
      const seen = await run('sequential');
      expect(seen).toEqual({ first: 201, kept: [2] });
    });

    it('control: the same Promise.all, the retry outside @Idempotent(): one row', async () => {
      const seen = await run('outside');
      expect(seen.kept.length).toBeLessThanOrEqual(1);
    });

    // Fails today: both tries' order rows committed, [1, 2], with the key's 201.
    it('Promise.all: never both tries kept', async () => {
      const seen = await run('parallel');
      const kept = seen.kept.length <= 1 ? 'at most one' : seen.kept;
      expect({ ...seen, kept }).toEqual({ ...seen, kept: 'at most one' });
    });
  },
);
