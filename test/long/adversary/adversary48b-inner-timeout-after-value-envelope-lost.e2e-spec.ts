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
import { mergeMap, type Observable, timeout } from 'rxjs';
import request from 'supertest';
import { IdempotencyModule, Idempotent } from '../../../lib/index.js';
import { ADAPTERS } from '../../support/bootstrap.js';
import { type PoolApp, startPoolApp } from '../../support/pool-app.js';

/**
 * Adversary 48b: a `timeout()` inside `@Idempotent()` that fires AFTER the handler's Promise has
 * resolved, while another interceptor of the app's inside it still works on the value (the
 * route's envelope, which waits for a receipt number from a slow receipts service), stores the
 * handler's RAW value as the key's answer: every retry replays `{"ref":...}`, a body the route
 * never answers, without its envelope and receipt. The app follows the guide's advice for
 * timeouts ("Write `@Idempotent()` above a route's timeout interceptor to keep it outside"):
 * the envelope is inside `@Idempotent()`, where what it makes is normally what is stored.
 *
 * App: Express and Fastify, the pool seam. `POST /orders/:speed/:ref`,
 * `@UseInterceptors(Deadline, Receipt)` written above `@Idempotent()` (both inside it):
 * `Deadline` is `timeout({ first: 150 })`; `Receipt` is `mergeMap(async (data) => { await
 * receipts(); return { data, receipt } })`. The handler inserts the order row and returns
 * `{ ref, slow }` at once; the receipts service takes 300 ms (`slow`) or 10 ms (`fast`).
 * What happens: the handler's Promise resolves at ~10 ms; at 150 ms `Deadline` errors with
 * rxjs' TimeoutError while `Receipt` still awaits. `outcomeStillToCome`
 * (lib/http/handler-result.ts:211-219) takes any timeout error after the handler started for
 * "a timeout ... while the handler's Promise goes on" (handler-result.ts:217: it does not ask
 * whether that Promise is still pending) and hands back the handler's own outcome, its raw
 * value (handler-result.ts:196-201); lib/http/run-owned.ts:444-456 detaches and
 * `settleDetachedWith` commits the order row with `renderResult(value)`
 * (lib/http/settle-detached.ts:48): `{"ref":"…","slow":true}`, not the envelope `Receipt`
 * would have made. The client got a 500 (the TimeoutError through Nest's filter, not stored);
 * its retry gets 201 `{"ref":…}` replayed for ever, with no receipt.
 * Expected (docs/guides/transactions.md:192: "a timeout ... not stored", the handler's effects
 * commit with "its own answer"; what the chain inside `@Idempotent()` makes of the handler's
 * value is the route's answer, as the control shows): the retry gets the route's answer,
 * `{ data, receipt }` (stored with the order row), or the key back and the handler run again;
 * never a body the route does not answer.
 * Control: the receipts service quick (`fast`): 201 `{ data, receipt }`, replayed as is.
 * Severity: medium (a wrong answer replayed for the key: the route's contract broken on every
 * retry, the receipt number lost).
 */
let pool: Pool;
const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

@Injectable()
class Deadline implements NestInterceptor {
  intercept(_context: ExecutionContext, next: CallHandler): Observable<unknown> {
    return next.handle().pipe(timeout({ first: 150 }));
  }
}

/** The route's response envelope, with a receipt number from a slow receipts service. */
@Injectable()
class Receipt implements NestInterceptor {
  intercept(_context: ExecutionContext, next: CallHandler): Observable<unknown> {
    return next.handle().pipe(
      mergeMap(async (data: { ref: string; slow: boolean }) => {
        await sleep(data.slow ? 300 : 10);
        return { data, receipt: `R-${data.ref}` };
      }),
    );
  }
}

@Controller('orders')
class OrdersController {
  @Post(':speed/:ref')
  @UseInterceptors(Deadline, Receipt)
  @Idempotent()
  async place(@Param('speed') speed: string, @Param('ref') ref: string): Promise<unknown> {
    await pool.query('INSERT INTO orders (ref) VALUES ($1)', [ref]);
    return { ref, slow: speed === 'slow' };
  }
}

describe.each(ADAPTERS)(
  'adversary 48b: an inner timeout after the handler value, on %s',
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
      fixture = await startPoolApp(`adv48b_envelope_${adapter}`, {
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

    async function run(speed: string) {
      const ref = `${adapter}-${speed}`;
      const send = () =>
        request(fixture.app.getHttpServer())
          .post(`/orders/${speed}/${ref}`)
          .set('Idempotency-Key', ref)
          .send({});
      const first = await send();
      await sleep(600);
      const again = await send();
      const orders = await fixture.admin.query('SELECT 1 FROM orders WHERE ref = $1', [ref]);
      return {
        first: [first.status, first.text],
        again: [again.status, again.text, again.headers['idempotent-replayed']],
        orders: orders.rowCount,
      };
    }

    it('control: the receipt in time: the envelope answered and replayed', async () => {
      const seen = await run('fast');
      const ref = `${adapter}-fast`;
      const answer = JSON.stringify({ data: { ref, slow: false }, receipt: `R-${ref}` });
      expect(seen).toEqual({ first: [201, answer], again: [201, answer, 'true'], orders: 1 });
    });

    // Failed before the fix: again was [201, '{"ref":"…-slow","slow":true}', 'true'].
    // Fixed as the header allows: the key given back (the order rolled back), so the retry
    // runs again; its receipt is late again, so it too is the timeout's answer, not stored.
    it("the receipt late: the retry gets the route's envelope, never the raw value", async () => {
      const seen = await run('slow');
      const ref = `${adapter}-slow`;
      const answer = JSON.stringify({ data: { ref, slow: true }, receipt: `R-${ref}` });
      expect(seen.again[1]).not.toBe(JSON.stringify({ ref, slow: true }));
      if (seen.again[0] === 201) {
        expect(seen.again[1]).toBe(answer);
        expect(seen.orders).toBe(1);
      } else {
        expect(seen.again).toEqual([500, expect.any(String), undefined]);
        expect(seen.orders).toBe(0);
      }
    });
  },
);
