import {
  Body,
  type CallHandler,
  Controller,
  type ExecutionContext,
  Injectable,
  Logger,
  Module,
  type NestInterceptor,
  type PipeTransform,
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
 * Adversary, round 32: two interceptors that each watch the result "on the side" (a metrics
 * one that records every answer, an audit one that gives up on slow requests), and a slow
 * pipe: more than one run is told to claim again at the same moment, and they race.
 *
 * The app, two global interceptors outside `@Idempotent()`, in this order:
 *  - metrics: `const r$ = next.handle(); r$.subscribe({ next: record }); return r$;`
 *  - audit: `const r$ = next.handle(); r$.pipe(timeout({ first: 100, with: () => EMPTY }))
 *    .subscribe(log); return r$;` (round 31's side watcher that stops watching);
 * and an async pipe on the body that is slow (400 ms) the first time it sees a payment.
 *
 * The chain is subscribed four times: metrics' side subscription runs audit, whose side
 * subscription is run 0 and whose returned one run 1; the returned metrics subscription runs
 * audit again: run 2 (side) and run 3 (the client's). Run 0 owns the key; runs 1, 2 and 3 all
 * join it (lib/idempotency.interceptor.ts:231-241; runs 2 and 3 through the delegation of the
 * run before them, :216-217). At 100 ms, in the slow pipe, the audit's watchers give up: run 0
 * is torn down before its handler started and gives its key back (lib/http/run-owned.ts:407-412),
 * then resolves its one `shared` promise with `claimAgain` (:412); run 2 is gone. Runs 1 and 3,
 * waiting on that same promise, both claim again at once (interceptor.ts:238, `claimAfter`):
 * nothing orders them (the fix of round 31 orders a run after the give-back, not the runs
 * that were told together). Run 1 (the metrics side) claims first and owns the key; run 3, the
 * client's, meets it in progress and the library answers its own 409 `key_in_progress`. The
 * handler then runs under run 1 (whose hold sees the 409 written and detaches it), and its 201
 * is stored for the retry.
 *
 * Expected: the request is answered with its handler's 201 (runs told to claim again at once
 * should claim one after another, the later joining the first, as at the start), one row, the
 * retry replaying 201.
 *
 * Control: the same app with a quick pipe (the handler answers before the audit gives up):
 * 201, one row, replayed.
 *
 * Severity: medium (the library's 409 is the first answer to a request that is done once; a
 * retry heals it).
 */
let pool: Pool;
let slowMs = 400;
const seen = new Set<string>();

@Injectable()
class LookupPipe implements PipeTransform {
  async transform(value: { ref: string }) {
    if (!seen.has(value.ref)) {
      seen.add(value.ref);
      await new Promise((resolve) => setTimeout(resolve, slowMs));
    }
    return value;
  }
}

@Injectable()
class MetricsInterceptor implements NestInterceptor {
  private readonly logger = new Logger('metrics');
  intercept(_context: ExecutionContext, next: CallHandler): Observable<unknown> {
    const result$ = next.handle();
    result$.subscribe({
      next: () => this.logger.debug('answered'),
      error: (error: unknown) => this.logger.debug(`failed ${String(error)}`),
    });
    return result$;
  }
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
  @Post('payments')
  @Idempotent()
  async pay(@Body(LookupPipe) body: { ref: string }) {
    await pool.query('INSERT INTO payments (ref) VALUES ($1)', [body.ref]);
    return { ref: body.ref, status: 'captured' };
  }
}

@Module({
  imports: [IdempotencyModule.forRootAsync({ useFactory: () => ({ globalKeys: true, pool }) })],
  controllers: [PaymentsController],
  providers: [
    { provide: APP_INTERCEPTOR, useClass: MetricsInterceptor },
    { provide: APP_INTERCEPTOR, useClass: SlowWatchInterceptor },
  ],
})
class PaymentsModule {}

describe.each<AdapterName>(['express', 'fastify'])(
  'adversary 32 (%s): runs told to claim again together race for the key',
  (adapter) => {
    let fixture: PoolApp;

    beforeAll(async () => {
      fixture = await startPoolApp(`adv32_two_watchers_${adapter}`, {
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
      ['control: a quick pipe (answered before the audit gives up)', 0],
      ['a slow pipe: the audit gives up before the handler started', 400],
    ] as const)(
      '%s: 201, one payment, replayed',
      async (name, ms) => {
        slowMs = ms;
        const ref = `adv32-tw-${adapter}-${ms}`;
        const first = await pay(ref);
        await new Promise((resolve) => setTimeout(resolve, 800));
        const retry = await pay(ref);
        if (process.env.ADV_DEBUG) console.log(name, first.status, retry.status, await rows(ref));
        // Received with the slow pipe: first 409 key_in_progress; one row; the retry replays 201.
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
