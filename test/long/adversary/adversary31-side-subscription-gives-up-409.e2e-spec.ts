import {
  Body,
  type CallHandler,
  Controller,
  type ExecutionContext,
  Injectable,
  Logger,
  Module,
  type NestInterceptor,
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
 * Adversary, round 31: an audit "on the side" that stops watching a slow request, while the
 * returned subscription still waits for the handler.
 *
 * The app: a global interceptor outside `@Idempotent()` that watches the result on the side
 * and gives up watching after 100 ms (rxjs `timeout` with `with`, logging "slow"), and returns
 * the result:
 *
 *   const result$ = next.handle();
 *   result$.pipe(timeout({ first: 100, with: () => { log('slow'); return EMPTY; } }))
 *     .subscribe({ next: (v) => log(v) });
 *   return result$;
 *
 * The handler writes its row and takes 300 ms.
 *
 * What happens: run 0 (the side subscription) owns the key and runs the handler; run 1 (the
 * returned one) joins it, waiting for what it comes to (lib/idempotency.interceptor.ts:211-223,
 * `run.outcome`). At 100 ms the side `timeout` unsubscribes run 0: its teardown
 * (lib/http/run-owned.ts:396) treats every unsubscription as "answered from outside"
 * (`answeredOutside`, :365), and as its handler has started it detaches (:380-386): the
 * handler goes on to commit its own answer, and run 1 is told `claimAgain`. Nothing was
 * answered, yet run 1 claims the key again (interceptor.ts:220), meets run 0's live claim and
 * the library answers its own 409 `key_in_progress` to the client, whose one request is in
 * fact being done; run 0 then commits 201 with the row, which the retry replays.
 *
 * Expected: run 1 answers with what run 0's handler comes to (a side subscription that stops
 * is not an answer from outside: nothing was written on the response), 201 with one row, the
 * retry replaying 201.
 *
 * A `oneCommit` route holds (the re-claim waits on run 0's uncommitted claim row, then replays
 * its 201), and so does a side watcher that gives up while a slow pipe runs (the key is given
 * back first, then claimed again).
 *
 * Control: the same app with a quick handler (it answers before the side watcher gives up):
 * 201, one row, replayed.
 *
 * Severity: medium (the first answer is the library's 409 for a request that succeeds; the
 * effects happen once and the retry gets the 201).
 */
let pool: Pool;
let handlerMs = 300;

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
  @Post('payments')
  @Idempotent()
  async pay(@Body() body: { ref: string }) {
    await pool.query('INSERT INTO payments (ref) VALUES ($1)', [body.ref]);
    await new Promise((resolve) => setTimeout(resolve, handlerMs));
    return { ref: body.ref, status: 'captured' };
  }
}

@Module({
  imports: [IdempotencyModule.forRootAsync({ useFactory: () => ({ globalKeys: true, pool }) })],
  controllers: [PaymentsController],
  providers: [{ provide: APP_INTERCEPTOR, useClass: SlowWatchInterceptor }],
})
class PaymentsModule {}

describe.each<AdapterName>(['express', 'fastify'])(
  'adversary 31 (%s): a side subscription that stops watching makes the returned run claim again',
  (adapter) => {
    let fixture: PoolApp;

    beforeAll(async () => {
      fixture = await startPoolApp(`adv31_side_gives_up_${adapter}`, {
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

    const pay = (ref: string) =>
      request(fixture.app.getHttpServer())
        .post('/payments')
        .set('Idempotency-Key', ref)
        .send({ ref })
        .timeout(5_000);
    const rows = async (ref: string) =>
      Number(
        (await fixture.admin.query('SELECT count(*) FROM payments WHERE ref = $1', [ref])).rows[0]
          .count,
      );

    it.each([
      ['control: the handler answers before the watcher gives up', 0],
      ['the handler takes 300 ms: the side watcher gives up at 100 ms', 300],
    ] as const)(
      '%s: 201, one payment, replayed',
      async (name, ms) => {
        handlerMs = ms;
        const ref = `adv31-sg-${adapter}-${ms}`;
        const first = await pay(ref);
        await new Promise((resolve) => setTimeout(resolve, 800));
        const retry = await pay(ref);
        if (process.env.ADV_DEBUG) console.log(name, first.status, first.body, retry.status);
        // Received with 300 ms: first 409 key_in_progress; one row; the retry replays 201.
        expect({ status: first.status, body: first.body as unknown }).toEqual({
          status: 201,
          body: { ref, status: 'captured' },
        });
        expect(await rows(ref)).toBe(1);
        expect({ status: retry.status, replayed: retry.headers['idempotent-replayed'] }).toEqual({
          status: 201,
          replayed: 'true',
        });
      },
      20_000,
    );
  },
);
