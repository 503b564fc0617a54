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
import { type Observable, of, timeout } from 'rxjs';
import request from 'supertest';
import { IdempotencyModule, Idempotent } from '../../../lib/index.js';
import { ADAPTERS } from '../../support/bootstrap.js';
import { type PoolApp, startPoolApp } from '../../support/pool-app.js';

/**
 * Adversary 43a: rxjs' own fallback form of `timeout()`, `timeout({ first, with: () =>
 * of(...) })` ("answer 'accepted' if the work is slow, and let it finish"), written inside
 * `@Idempotent()` like the guide's inner `timeout()`. The fallback is a VALUE, not a timeout
 * error, so the library takes it for the handler's answer: it stores `{ accepted: true }` as the
 * key's answer and commits the request's transaction while the handler is still running. The
 * handler's later statements then "run apart" in autocommit (request-transaction.ts:757-767,
 * :900-904), outside the atomic unit, and its failure after that point reaches nobody.
 *
 * App: Express and Fastify, the pool seam. `POST /orders/inside/:outcome/:ref`, with the app's
 * `@UseInterceptors(AcceptIfSlow)` written above `@Idempotent()` (inside it). The handler
 * inserts the order row, waits for the card provider (200 ms), then either inserts the ledger
 * row and answers `{ ref, paid: true }`, or throws 409 "card declined" (`declined`).
 * What happens: at 100 ms the fallback emits `{ accepted: true }` and completes; runOwned
 * (lib/http/run-owned.ts:394-404 `next`, :464-473 `complete`) treats it as the handler's value,
 * the adapter writes it and lib/http/run-owned.ts:237 `commitAnswer` commits the order row with
 * `{ accepted: true }` as the key's answer. The handler goes on: paid, its ledger row is sent
 * after the commit and runs apart (committed alone); declined, its 409 goes nowhere. The key
 * replays `{ accepted: true }` for ever: an order row committed with no payment, and the
 * decline lost; the client's retry can never learn it nor run the work again.
 * Expected (docs/guides/transactions.md:191-192, the outer and inner timeout rows: the
 * timeout's answer goes out "not stored"; the handler's effects "commit with its own answer
 * when it settles", a failure "rolled back, its key given back"): the fallback unstored; the
 * order row and the ledger row committed together with the handler's own answer, or nothing of
 * a declined handler kept. Never the order row alone under a stored "accepted".
 * Control: the same interceptor written below `@Idempotent()` (outside it): declined, nothing
 * kept and the key given back (the retry runs again); paid, both rows and the retry replays
 * `{ ref, paid: true }`.
 * Severity: critical (a partial effect committed and a wrong answer stored for the key: the
 * declined payment's order row kept, replayed as "accepted").
 */
let pool: Pool;
const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

/** Answers "accepted" when the work is slow, and lets it finish (rxjs' documented fallback). */
@Injectable()
class AcceptIfSlow implements NestInterceptor {
  intercept(_context: ExecutionContext, next: CallHandler): Observable<unknown> {
    return next.handle().pipe(timeout({ first: 100, with: () => of({ accepted: true }) }));
  }
}

async function order(ref: string, declined: boolean): Promise<unknown> {
  await pool.query('INSERT INTO orders (ref) VALUES ($1)', [ref]);
  // The card provider: slow.
  await sleep(200);
  if (declined) throw new ConflictException('card declined');
  await pool.query('INSERT INTO ledger (ref) VALUES ($1)', [ref]);
  return { ref, paid: true };
}

@Controller('orders')
class OrdersController {
  @Post('inside/:outcome/:ref')
  @UseInterceptors(AcceptIfSlow)
  @Idempotent()
  inside(@Param('outcome') outcome: string, @Param('ref') ref: string): Promise<unknown> {
    return order(ref, outcome === 'declined');
  }

  @Post('outside/:outcome/:ref')
  @Idempotent()
  @UseInterceptors(AcceptIfSlow)
  outside(@Param('outcome') outcome: string, @Param('ref') ref: string): Promise<unknown> {
    return order(ref, outcome === 'declined');
  }
}

describe.each(ADAPTERS)(
  'adversary 43a: timeout({ with: () => of(...) }) inside @Idempotent(), on %s',
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
      fixture = await startPoolApp(`adv43a_fallback_${adapter}`, {
        module: OrdersModule,
        adapter,
        max: 4,
        usePool: (started) => (pool = started),
        setup: async (owner) => {
          await owner.query('CREATE TABLE orders (id serial PRIMARY KEY, ref text NOT NULL)');
          await owner.query('CREATE TABLE ledger (id serial PRIMARY KEY, ref text NOT NULL)');
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
      // The handler settled long since (its provider takes 200 ms).
      await sleep(500);
      const again = await send();
      const orders = await fixture.admin.query('SELECT 1 FROM orders WHERE ref = $1', [ref]);
      const ledger = await fixture.admin.query('SELECT 1 FROM ledger WHERE ref = $1', [ref]);
      const replay = again.headers['idempotent-replayed'] === 'true';
      const body = again.body as { accepted?: boolean; paid?: boolean };
      return {
        first: first.status,
        orders: orders.rowCount,
        ledger: ledger.rowCount,
        // The key's stored answer is the interceptor's fallback, not the handler's.
        replayedFallback: replay && body.accepted === true,
        replayed: replay ? [again.status, body.paid ? 'paid' : JSON.stringify(body)] : undefined,
      };
    }

    it('control: the fallback outside @Idempotent(), declined: nothing kept, never replayed', async () => {
      const seen = await run('outside', 'declined');
      expect(seen).toMatchObject({ orders: 0, ledger: 0, replayedFallback: false });
    });

    it('control: the fallback outside @Idempotent(), paid: the retry replays the payment', async () => {
      const seen = await run('outside', 'paid');
      expect(seen).toMatchObject({ orders: 1, ledger: 1, replayed: [201, 'paid'] });
    });

    // Fails today: { orders: 1, ledger: 0, replayedFallback: true }.
    it('the fallback inside @Idempotent(), declined: no order row alone, no stored "accepted"', async () => {
      const seen = await run('inside', 'declined');
      expect(seen).toMatchObject({ orders: 0, ledger: 0, replayedFallback: false });
    });

    // Fails today: both rows (the ledger's committed apart), but the key replays the fallback.
    it('the fallback inside @Idempotent(), paid: the retry replays the payment', async () => {
      const seen = await run('inside', 'paid');
      expect(seen).toMatchObject({ orders: 1, ledger: 1, replayed: [201, 'paid'] });
    });
  },
);
