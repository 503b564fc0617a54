import {
  Body,
  type CallHandler,
  Controller,
  type ExecutionContext,
  Injectable,
  Module,
  type NestInterceptor,
  type PipeTransform,
  Post,
} from '@nestjs/common';
import { APP_INTERCEPTOR } from '@nestjs/core';
import { catchError, type Observable, throwError, timeout, TimeoutError } from 'rxjs';
import { type Pool } from 'pg';
import request from 'supertest';
import { type AdapterName } from '../../support/bootstrap.js';
import { IdempotencyModule, Idempotent } from '../../../lib/index.js';
import { type PoolApp, startPoolApp } from '../../support/pool-app.js';

/**
 * Adversary, round 31: an outer timeout that falls back to running the request again, while
 * the first run is still in a slow (async) pipe, before its handler started.
 *
 * The app: a global interceptor (outside `@Idempotent()`) that gives the chain 150 ms and, on
 * a timeout, runs it once more (rxjs docs: `timeout` + `catchError` re-subscribing):
 *
 *   next.handle().pipe(
 *     timeout(150),
 *     catchError((e) => (e instanceof TimeoutError ? next.handle() : throwError(() => e))),
 *   );
 *
 * and an async pipe on the body that is slow the first time (it loads a lookup table, 400 ms,
 * and keeps it): the first run times out in the pipe, the second runs quickly.
 *
 * What happens: run 1 owns the key; unsubscribed by the timeout before its handler started,
 * lib/http/run-owned.ts:388-393 gives the key back (`givingBack = rollBackAndRelease(...)`,
 * a rollback then a release query: not done yet). Run 2 (the re-subscription) starts at once:
 * lib/idempotency.interceptor.ts:207-212 asks run 1 to step aside / for its outcome, and both
 * answer `undefined` because `givingBack` is set (run-owned.ts:251 and :260: only a run that
 * was *already waiting* on `shared` is told `claimAgain` after the release, :393). So run 2
 * claims the key at once (`claimAndRun`, interceptor.ts:212) while run 1's release is still
 * on its way: it finds the key in progress and the library answers its own 409
 * `key_in_progress` to the request that is the key's only user (the adapter writes it; run 1's
 * hold lets it out unstored once the release is done, run-owned.ts:118-121). The handler never
 * runs; the client must retry for nothing.
 *
 * Expected: run 2 waits for run 1's give-back (as a concurrent run does, `claimAgain`), claims
 * the key and answers 201; one row; the retry replays 201.
 *
 * Fails on Express and Fastify alike (every run here). A `oneCommit` route holds: its
 * re-run's claim waits on run 1's uncommitted claim row until the rollback frees it.
 *
 * Control: the same app, the pipe quick the first time too (no timeout): 201, one row,
 * replayed; and the `oneCommit` route (passes).
 *
 * Severity: medium (a library 409 answered for a request nobody else runs; not stored, the
 * key is free again, the handler did not run, so a retry heals it).
 */
let pool: Pool;
let slowFirst = true;
let loaded = false;

@Injectable()
class LookupPipe implements PipeTransform {
  async transform(value: { ref: string }) {
    if (!loaded) {
      if (slowFirst) await new Promise((resolve) => setTimeout(resolve, 400));
      loaded = true;
    }
    return value;
  }
}

@Injectable()
class TimeoutFallbackInterceptor implements NestInterceptor {
  intercept(_context: ExecutionContext, next: CallHandler): Observable<unknown> {
    return next.handle().pipe(
      timeout(150),
      catchError((error: unknown) =>
        error instanceof TimeoutError ? next.handle() : throwError(() => error),
      ),
    );
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

  @Post('payments-one-commit')
  @Idempotent({ oneCommit: true })
  async payOneCommit(@Body(LookupPipe) body: { ref: string }) {
    await pool.query('INSERT INTO payments (ref) VALUES ($1)', [body.ref]);
    return { ref: body.ref, status: 'captured' };
  }
}

@Module({
  imports: [IdempotencyModule.forRootAsync({ useFactory: () => ({ globalKeys: true, pool }) })],
  controllers: [PaymentsController],
  providers: [{ provide: APP_INTERCEPTOR, useClass: TimeoutFallbackInterceptor }],
})
class PaymentsModule {}

describe.each<AdapterName>(['express', 'fastify'])(
  'adversary 31 (%s): a timeout fallback re-run before the handler started meets its own give-back',
  (adapter) => {
    let fixture: PoolApp;

    beforeAll(async () => {
      fixture = await startPoolApp(`adv31_timeout_pipe_${adapter}`, {
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

    const pay = (ref: string, path: string) =>
      request(fixture.app.getHttpServer())
        .post(path)
        .set('Idempotency-Key', ref)
        .send({ ref })
        .timeout(5_000);
    const rows = async (ref: string) =>
      Number(
        (await fixture.admin.query('SELECT count(*) FROM payments WHERE ref = $1', [ref])).rows[0]
          .count,
      );

    it.each([
      ['control: the pipe is quick, no timeout', false, '/payments'],
      ['the first run times out in the pipe and is run again', true, '/payments'],
      ['control: the same on a oneCommit route (holds)', true, '/payments-one-commit'],
    ] as const)(
      '%s: 201, one payment, replayed',
      async (name, slow, path) => {
        slowFirst = slow;
        loaded = false;
        const ref = `adv31-tp-${adapter}-${slow}-${path.length}`;
        const first = await pay(ref, path);
        // Everything settled: the pipe of the first run and any release.
        await new Promise((resolve) => setTimeout(resolve, 600));
        const retry = await pay(ref, path);
        if (process.env.ADV_DEBUG) console.log(name, first.status, first.body, retry.status);
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
