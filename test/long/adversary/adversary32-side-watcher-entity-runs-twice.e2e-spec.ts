import {
  BadGatewayException,
  Body,
  type CallHandler,
  Controller,
  type ExecutionContext,
  Injectable,
  Logger,
  Module,
  type NestInterceptor,
  Param,
  Post,
} from '@nestjs/common';
import { APP_INTERCEPTOR } from '@nestjs/core';
import { EMPTY, type Observable, timeout } from 'rxjs';
import { type Pool } from 'pg';
import request from 'supertest';
import { type AdapterName } from '../../support/bootstrap.js';
import { IdempotencyModule, Idempotent } from '../../../lib/index.js';
import { type PoolApp, startPoolApp } from '../../support/pool-app.js';

/**
 * Adversary, round 32: an audit "on the side" that stops watching a slow request (round 31's
 * app, whose fix makes the returned run replay what the detached handler stored), with a
 * handler that answers an entity, a class instance, as TypeORM and MikroORM handlers do.
 *
 * The app: a global interceptor outside `@Idempotent()` that watches the result on the side
 * and gives up watching after 100 ms (`timeout({ first: 100, with: () => EMPTY })`), and
 * returns the result (`const r$ = next.handle(); r$.pipe(...).subscribe(log); return r$;`).
 * The handler calls the payment provider (counted), writes its row, takes 300 ms and returns
 * `new Payment(ref, 'captured')` (a class; the same as a plain object in the control).
 *
 * What happens: run 0 (the side subscription) owns the key and runs the handler; run 1 (the
 * returned one) joins it. At 100 ms the side watcher unsubscribes run 0, which detaches
 * (lib/http/run-owned.ts:400-405); run 1 now waits for `detachedSettled`
 * (run-owned.ts:111-114, :276) to claim again and replay. But the detached handler's value is
 * a class instance: `settleDetached` will not render it (lib/http/settle-detached.ts:38-43,
 * `isPlainData`), rolls its work back and gives the key back; run 1 is told `claimAgain`,
 * claims the free key and runs the handler a second time, for the one request whose client
 * is still waiting. The provider is called twice (one row: the first run's was rolled back);
 * the same with a stream, a route with `@SerializeOptions()` or `@Res({ passthrough: true })`.
 * And the same when the handler fails with an error that is otherwise its stored answer (a
 * provider's 502, `as` 'blip'): a late failure is not storable (`lateAnswerStorable`), rolled
 * back and given back, and run 1 runs the handler again: the one request calls the provider
 * twice and answers the second call's payment (without the watcher: the 502, stored, once).
 * Nothing was answered from outside: run 1 could have answered run 0's value itself (it is
 * in memory, `result`), as it does when nobody stops watching.
 *
 * Expected: one run of the handler for the one request: 201 with the payment, the provider
 * called once, one row, the retry replaying 201.
 *
 * Control: the handler returns the same payment as a plain object: the late answer is stored,
 * run 1 replays it; the provider is called once.
 *
 * Severity: medium-high (a second execution of the handler for one request: an external call,
 * a payment provider's charge, made twice; the database's effects once).
 */
let pool: Pool;
const calls: Record<string, number> = {};

class Payment {
  constructor(
    readonly ref: string,
    readonly status: string,
  ) {}
}

@Injectable()
class SlowWatchInterceptor implements NestInterceptor {
  private readonly logger = new Logger('audit');
  intercept(_context: ExecutionContext, next: CallHandler): Observable<unknown> {
    const result$ = next.handle();
    result$
      .pipe(
        timeout({
          first: 100,
          with: () => {
            this.logger.warn('slow request, not audited');
            return EMPTY;
          },
        }),
      )
      .subscribe({
        next: (value) => this.logger.debug(`answered ${JSON.stringify(value)}`),
        error: (error: unknown) => this.logger.debug(`failed ${String(error)}`),
      });
    return result$;
  }
}

@Controller()
class PaymentsController {
  @Post('payments/:as')
  @Idempotent()
  async pay(@Param('as') as: string, @Body() body: { ref: string }) {
    calls[body.ref] = (calls[body.ref] ?? 0) + 1; // the payment provider, charged
    if (as === 'blip' && calls[body.ref] === 1) {
      await new Promise((resolve) => setTimeout(resolve, 300));
      throw new BadGatewayException('provider blip');
    }
    await pool.query('INSERT INTO payments (ref) VALUES ($1)', [body.ref]);
    await new Promise((resolve) => setTimeout(resolve, 300));
    return as === 'entity'
      ? new Payment(body.ref, 'captured')
      : { ref: body.ref, status: 'captured' };
  }
}

@Module({
  imports: [IdempotencyModule.forRootAsync({ useFactory: () => ({ globalKeys: true, pool }) })],
  controllers: [PaymentsController],
  providers: [{ provide: APP_INTERCEPTOR, useClass: SlowWatchInterceptor }],
})
class PaymentsModule {}

describe.each<AdapterName>(['express', 'fastify'])(
  'adversary 32 (%s): a side watcher that gives up on a handler answering an entity runs it twice',
  (adapter) => {
    let fixture: PoolApp;

    beforeAll(async () => {
      fixture = await startPoolApp(`adv32_side_entity_${adapter}`, {
        module: PaymentsModule,
        max: 4,
        adapter,
        usePool: (started) => (pool = started),
        setup: async (admin) => {
          await admin.query('CREATE TABLE payments (id serial PRIMARY KEY, ref text NOT NULL)');
        },
      });
    }, 60_000);

    afterAll(() => fixture?.close());

    const pay = (ref: string, as: string) =>
      request(fixture.app.getHttpServer())
        .post(`/payments/${as}`)
        .set('Idempotency-Key', ref)
        .send({ ref })
        .timeout(5_000);
    const rows = async (ref: string) =>
      Number(
        (await fixture.admin.query('SELECT count(*) FROM payments WHERE ref = $1', [ref])).rows[0]
          .count,
      );

    it.each([
      ['control: the handler answers a plain object', 'plain', 201, 1],
      ['the handler answers an entity (a class instance)', 'entity', 201, 1],
      ['the handler fails with a 502 (its stored answer without the watcher)', 'blip', 502, 0],
    ] as const)(
      '%s: its one run answered (%s), the provider called once, replayed',
      async (name, as, status, payments) => {
        const ref = `adv32-se-${adapter}-${as}`;
        const first = await pay(ref, as);
        await new Promise((resolve) => setTimeout(resolve, 800));
        const retry = await pay(ref, as);
        if (process.env.ADV_DEBUG) {
          console.log(name, first.status, first.body, retry.status, calls[ref], await rows(ref));
        }
        // Received, entity: 201 (the second run's), the provider called twice, one row.
        // Received, blip: 201 (the second run's), the provider called twice, one row.
        expect({ status: first.status, calls: calls[ref], rows: await rows(ref) }).toEqual({
          status,
          calls: 1,
          rows: payments,
        });
        expect({ status: retry.status, replayed: retry.headers['idempotent-replayed'] }).toEqual({
          status,
          replayed: 'true',
        });
      },
      20_000,
    );
  },
);
