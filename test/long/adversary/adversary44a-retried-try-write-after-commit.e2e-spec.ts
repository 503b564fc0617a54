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
 * Adversary 44a: round 43's fix refuses a superseded try's statements the request's transaction
 * (lib/transaction/request-transaction.ts:887, `inRetriedTry()` in `connection()`), "so that
 * only the retry's writes commit" (docs/guides/transactions.md, row "the app retries the handler
 * inside @Idempotent()"). The check sits in `connection()` only. A statement that arrives once
 * the request's transaction has ended never gets there: `PoolTransaction.statement()` sends it
 * apart at once (lib/data-layers/pool-transaction.ts:190, `if (this.ended) return this.apart(…)`,
 * then request-transaction.ts:752-767 `afterEnd`: "runs apart if the request committed"), with
 * no look at which try's work it is. So the failed try's orphaned step is refused only if it is
 * quick enough to write before the retry's commit; a slower one commits on a connection of its
 * own, beside the retry's row.
 *
 * App: Express and Fastify, the pool seam. Round 43a's app: `@UseInterceptors(RetryBlip)` above
 * `@Idempotent()` (inside it: `retry({ count: 1, delay: 20 })`), the handler `await
 * Promise.all([place(ref), authorize()])`. `place` reserves stock (an HTTP call) then inserts the
 * order row; `authorize` answers a 503 blip after 10 ms the first time. Here the stock service is
 * slow on its first call (a cold cache: 400 ms) and quick after (20 ms).
 * What happens: try 1 rejects at 10 ms with nothing sent; the retry runs try 2, which places its
 * order and answers 201 at ~60 ms; the request commits. At 400 ms try 1's `place` sends its
 * INSERT in try 1's (superseded) context: the transaction has ended, so pool-transaction.ts:190
 * runs it apart, and it commits. Two order rows, one 201, the key stores try 2's answer.
 * Expected: the superseded try's write refused (RetriedTryStatementError) whenever it comes, as
 * it is while the retry still runs: one row, attempt 2.
 * Control: `early`: the stock call of try 1 takes 100 ms and try 2's 200 ms, so the orphaned
 * INSERT arrives while try 2 still runs: refused, one row (passes today).
 * Severity: critical (a double effect: the failed try's order committed beside the retry's).
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

async function place(ref: string, attempt: number, stockMs: number): Promise<{ id: number }> {
  // The stock reservation (an HTTP call), then the order row.
  await sleep(stockMs);
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
  /** The stock service slow on its first call only: try 1's INSERT comes after the commit. */
  @Post('late/:ref')
  @UseInterceptors(RetryBlip)
  @Idempotent()
  async late(@Param('ref') ref: string): Promise<unknown> {
    const attempt = attemptOf(ref);
    const [order] = await Promise.all([
      place(ref, attempt, attempt === 1 ? 400 : 20),
      authorize(attempt),
    ]);
    return { ref, attempt, order: order.id };
  }

  /** Try 1's INSERT comes while try 2 still runs. */
  @Post('early/:ref')
  @UseInterceptors(RetryBlip)
  @Idempotent()
  async early(@Param('ref') ref: string): Promise<unknown> {
    const attempt = attemptOf(ref);
    const [order] = await Promise.all([
      place(ref, attempt, attempt === 1 ? 100 : 200),
      authorize(attempt),
    ]);
    return { ref, attempt, order: order.id };
  }
}

describe.each(ADAPTERS)(
  'adversary 44a: a retried try whose orphaned write comes after the commit, on %s',
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
      fixture = await startPoolApp(`adv44a_late_orphan_${adapter}`, {
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

    async function run(way: 'late' | 'early') {
      const ref = `${adapter}-${way}`;
      const first = await request(fixture.app.getHttpServer())
        .post(`/orders/${way}/${ref}`)
        .set('Idempotency-Key', ref)
        .send({});
      // Everything settled: the failed try's orphaned step is long over.
      await sleep(800);
      const rows = await fixture.admin.query<{ attempt: number }>(
        'SELECT attempt FROM orders WHERE ref = $1 ORDER BY id',
        [ref],
      );
      const replay = await request(fixture.app.getHttpServer())
        .post(`/orders/${way}/${ref}`)
        .set('Idempotency-Key', ref)
        .send({});
      return {
        first: first.status,
        replayed: replay.status === first.status && replay.text === first.text,
        kept: rows.rows.map((row) => row.attempt),
      };
    }

    it('control: the orphaned INSERT comes while the retry runs: refused, one row', async () => {
      const seen = await run('early');
      expect(seen).toEqual({ first: 201, replayed: true, kept: [2] });
    });

    // Fails today: kept [2, 1], try 1's row committed apart after the request's commit.
    it('the orphaned INSERT comes after the commit: still refused, one row', async () => {
      const seen = await run('late');
      expect(seen).toEqual({ first: 201, replayed: true, kept: [2] });
    });
  },
);
