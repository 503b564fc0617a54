import {
  type CallHandler,
  ConflictException,
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
import { map, type Observable, of, timeout, timer } from 'rxjs';
import request from 'supertest';
import { IdempotencyModule, Idempotent } from '../../../lib/index.js';
import { ADAPTERS } from '../../support/bootstrap.js';
import { type PoolApp, startPoolApp } from '../../support/pool-app.js';

/**
 * Adversary 48b: round 43a's fix (the value a `timeout({ first, with: () => of(...) })` inside
 * `@Idempotent()` gives in the handler's place is "not stored") holds for a handler that answers
 * a Promise of plain data only. Over a handler that answers an Observable (the @nestjs/axios
 * shape: `async` method, write the order row, then `return this.http.post(...)`), the fallback
 * is taken for the handler's answer: stored, and committed with the order row, while the
 * provider's call it stood in for was cancelled. Every retry replays `{ accepted: true }`.
 *
 * App: Express and Fastify, the pool seam. `POST /orders/rx/:outcome/:ref`, the app's
 * `@UseInterceptors(AcceptIfSlow)` written above `@Idempotent()` (inside it:
 * `timeout({ first: 100, with: () => of({ accepted: true }) })`). The handler inserts the order
 * row, then answers the card provider's Observable (200 ms; `declined`: a 409).
 * What happens: `outcomeStillToCome` (lib/http/handler-result.ts:211-219) calls a value "not the
 * handler's answer" only while the try's native Promise is pending (handler-result.ts:218,
 * `lastTry.pending`). The async handler's Promise resolved (to the Observable) at once, so
 * `pending` is false (lib/idempotent.decorator.ts:57) when the fallback comes at 100 ms; and
 * for an Observable answer `handlerOutcome` has nothing to wait for anyway
 * (handler-result.ts:195). lib/http/run-owned.ts:408 thus gets undefined, :420 takes the
 * fallback as `result`, and run-owned.ts:239 `commitAnswer` commits the order row with
 * `{ accepted: true }` as the key's answer. The timeout unsubscribed the provider's call: the
 * handler's own answer (paid, or the 409 decline) never comes and nobody learns it.
 * Expected (docs/guides/transactions.md:192, the inner-timeout row: the value "not stored"; "an
 * Observable handler (cancelled by the timeout) ... rolled back, its key given back"; "A
 * timeout is never a stored answer"): no order row kept, the fallback never replayed; the retry
 * runs the handler again.
 * Control: the same work answered as a Promise (`promise` route, round 43a's app): declined,
 * the fallback goes out unstored, nothing kept.
 * Severity: critical (an order committed with no payment, and a wrong answer, "accepted",
 * stored and replayed for the key for ever).
 */
let pool: Pool;
const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

/** Answers "accepted" when the work is slow (rxjs' documented fallback form of timeout()). */
@Injectable()
class AcceptIfSlow implements NestInterceptor {
  intercept(_context: ExecutionContext, next: CallHandler): Observable<unknown> {
    return next.handle().pipe(timeout({ first: 100, with: () => of({ accepted: true }) }));
  }
}

/** The card provider's call, as an HTTP client's Observable (`HttpService.post()`): 200 ms. */
function charge(ref: string, declined: boolean): Observable<unknown> {
  return timer(200).pipe(
    map(() => {
      if (declined) throw new ConflictException('card declined');
      return { ref, paid: true };
    }),
  );
}

@Controller('orders')
class OrdersController {
  /** The @nestjs/axios shape: write, then answer the provider's Observable. */
  @Post('rx/:outcome/:ref')
  @UseInterceptors(AcceptIfSlow)
  @Idempotent()
  async rx(@Param('outcome') outcome: string, @Param('ref') ref: string): Promise<unknown> {
    await pool.query('INSERT INTO orders (ref) VALUES ($1)', [ref]);
    return charge(ref, outcome === 'declined');
  }

  /** The same work answered as a Promise (round 43a's app). */
  @Post('promise/:outcome/:ref')
  @UseInterceptors(AcceptIfSlow)
  @Idempotent()
  async promise(@Param('outcome') outcome: string, @Param('ref') ref: string): Promise<unknown> {
    await pool.query('INSERT INTO orders (ref) VALUES ($1)', [ref]);
    await sleep(200);
    if (outcome === 'declined') throw new ConflictException('card declined');
    return { ref, paid: true };
  }
}

describe.each(ADAPTERS)(
  'adversary 48b: timeout({ with }) inside @Idempotent() over an Observable answer, on %s',
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
      fixture = await startPoolApp(`adv48b_rxfallback_${adapter}`, {
        module: OrdersModule,
        adapter,
        max: 4,
        usePool: (started) => (pool = started),
        setup: async (owner) => {
          await owner.query('CREATE TABLE orders (id serial PRIMARY KEY, ref text NOT NULL)');
        },
      });
    }, 60_000);

    afterAll(async () => {
      await fixture?.close();
    });

    async function run(way: string, outcome: string) {
      const ref = `${adapter}-${way}-${outcome}`;
      const send = () =>
        request(fixture.app.getHttpServer())
          .post(`/orders/${way}/${outcome}/${ref}`)
          .set('Idempotency-Key', ref)
          .send({});
      const first = await send();
      await sleep(500);
      const again = await send();
      const orders = await fixture.admin.query('SELECT 1 FROM orders WHERE ref = $1', [ref]);
      const replay = again.headers['idempotent-replayed'] === 'true';
      const body = again.body as { accepted?: boolean };
      return {
        first: [first.status, JSON.stringify(first.body)],
        again: [again.status, JSON.stringify(again.body), replay],
        orders: orders.rowCount,
        replayedFallback: replay && body.accepted === true,
      };
    }

    it('control: a Promise answer, declined: the fallback not stored, nothing kept', async () => {
      const seen = await run('promise', 'declined');
      expect(seen).toMatchObject({ orders: 0, replayedFallback: false });
    });

    // Fails today: { orders: 1, replayedFallback: true } (201 {"accepted":true} replayed).
    it('an Observable answer, declined: the fallback not stored, the order rolled back', async () => {
      const seen = await run('rx', 'declined');
      expect(seen).toMatchObject({ orders: 0, replayedFallback: false });
    });
  },
);
