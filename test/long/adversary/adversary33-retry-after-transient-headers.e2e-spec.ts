import {
  Body,
  type CallHandler,
  Controller,
  type ExecutionContext,
  Injectable,
  Module,
  type NestInterceptor,
  Post,
} from '@nestjs/common';
import { APP_INTERCEPTOR } from '@nestjs/core';
import { type Observable, retry } from 'rxjs';
import { type Pool } from 'pg';
import request from 'supertest';
import { type AdapterName } from '../../support/bootstrap.js';
import { IdempotencyModule, Idempotent } from '../../../lib/index.js';
import { type PoolApp, startPoolApp } from '../../support/pool-app.js';

/**
 * Adversary, round 33: the classic "retry on a serialization failure" interceptor outside
 * `@Idempotent()`, on Express and Fastify: the handler's success after the app's retry is
 * answered, and stored for ever, as a problem.
 *
 * The app: a global `APP_INTERCEPTOR` `next.handle().pipe(retry({ count: 3, delay: 50 }))`.
 * `POST /transfers` (`@Idempotent()`) inserts a row and answers its id; its first try meets a
 * serialization failure (40001), the second succeeds.
 *
 * What happens: the first run's 40001 is a passing failure: rolled back, the key given back,
 * and its error mapped to the library's 503 (lib/transaction/handler-failure.ts:45,
 * `tools.toHttp`). Making that exception already writes on the response the runs share
 * (lib/http/to-http.ts:19-23): `Retry-After: 1` and `Content-Type: application/problem+json`
 * set through the adapter, and the response's `setHeader` wrapped for good so that any later
 * `application/json` becomes `application/problem+json` (lib/http/pin-content-type.ts). The
 * 503 is never answered: the app's `retry()` takes it and runs the request again; the second
 * run claims the key anew and forgets only the noted error (lib/http/run-owned.ts:64), not the
 * headers. Its handler's 201 then goes out typed `application/problem+json` with
 * `Retry-After: 1`, and is stored with that type: every replay is a 201 "problem" (without the
 * Retry-After, so the first answer and its replays differ as well). A client or SDK that
 * reads the media type takes the transfer made for a failure, and one that honours Retry-After
 * sends it again.
 *
 * The same with a replay: a duplicate sent while the first request is in progress meets the
 * library's 409 (its headers written and the type pinned the same way), the app's retry runs
 * it again once the first is done, and the stored answer is replayed (the hold's `send` sets
 * the stored `Content-Type: application/json`, lib/http/response-hold.ts `send`, through the
 * pinned `setHeader`): the replay goes out as `application/problem+json`, not byte for byte
 * what was stored.
 *
 * Expected: the 201 as the handler answers it (`application/json`, no Retry-After), stored and
 * replayed so: what an exception the app swallowed would have answered leaves nothing behind.
 *
 * Control: no failure, no retry: `application/json`, replayed the same.
 *
 * Severity: medium (the stored answer of a successful, realistic retry is mislabeled for the
 * key's retention, and the first answer says "retry later" on a success; the body is right).
 * Related: adversary33-late-watcher-409-headers, another run's library error written on the
 * shared response the same way.
 */
let pool: Pool;
let failOnce = false;
let calls = 0;

@Injectable()
class RetryInterceptor implements NestInterceptor {
  intercept(_context: ExecutionContext, next: CallHandler): Observable<unknown> {
    return next.handle().pipe(retry({ count: 3, delay: 50 }));
  }
}

@Controller()
class TransfersController {
  @Post('transfers')
  @Idempotent()
  async create(@Body() body: { ref: string; slowMs?: number }) {
    calls += 1;
    if (body.slowMs) await new Promise((resolve) => setTimeout(resolve, body.slowMs));
    const { rows } = await pool.query<{ id: number }>(
      'INSERT INTO transfers (ref) VALUES ($1) RETURNING id',
      [body.ref],
    );
    if (failOnce) {
      failOnce = false;
      await pool.query(
        "DO $$ BEGIN RAISE EXCEPTION 'could not serialize access' USING ERRCODE = '40001'; END $$",
      );
    }
    return { ref: body.ref, id: rows[0].id };
  }
}

@Module({
  imports: [IdempotencyModule.forRootAsync({ useFactory: () => ({ globalKeys: true, pool }) })],
  controllers: [TransfersController],
  providers: [{ provide: APP_INTERCEPTOR, useClass: RetryInterceptor }],
})
class TransfersModule {}

describe.each<AdapterName>(['express', 'fastify'])(
  'adversary 33 (%s): an app retry after a passing failure',
  (adapter) => {
    let fixture: PoolApp;

    beforeAll(async () => {
      fixture = await startPoolApp(`adv33_retry_headers_${adapter}`, {
        module: TransfersModule,
        max: 4,
        adapter,
        usePool: (started) => (pool = started),
        setup: async (admin) => {
          await admin.query('CREATE TABLE transfers (id serial PRIMARY KEY, ref text NOT NULL)');
        },
      });
    }, 60_000);

    afterAll(() => fixture?.close());

    const check = async (ref: string) => {
      const post = () =>
        request(fixture.app.getHttpServer())
          .post('/transfers')
          .set('Idempotency-Key', ref)
          .send({ ref })
          .timeout(5000);
      calls = 0;
      const first = await post();
      const again = await post();
      const answer = (response: request.Response) => ({
        status: response.status,
        contentType: response.headers['content-type'] as unknown,
        retryAfter: response.headers['retry-after'] as unknown,
        body: response.body as unknown,
      });
      return { first: answer(first), calls, again: answer(again) };
    };

    it('the first try meets a serialization failure, the app retries: the 201 as the handler answers it', async () => {
      failOnce = true;
      const ref = `retried-${adapter}`;
      const seen = await check(ref);
      const id = (seen.first.body as { id: number }).id;
      const answer = {
        status: 201,
        contentType: 'application/json; charset=utf-8',
        retryAfter: undefined,
        body: { ref, id },
      };
      expect(seen).toEqual({ first: answer, calls: 2, again: answer });
    });

    it('a duplicate sent while the first is in progress, retried by the app until replayed: the replay as stored', async () => {
      failOnce = false;
      const ref = `duplicate-${adapter}`;
      const post = () =>
        request(fixture.app.getHttpServer())
          .post('/transfers')
          .set('Idempotency-Key', ref)
          .send({ ref, slowMs: 120 })
          .timeout(5000);
      const original = post().then((response) => response);
      await new Promise((resolve) => setTimeout(resolve, 40));
      const duplicate = await post();
      const first = await original;
      const answer = (response: request.Response) => ({
        status: response.status,
        contentType: response.headers['content-type'] as unknown,
        retryAfter: response.headers['retry-after'] as unknown,
        body: response.body as unknown,
        replayed: response.headers['idempotent-replayed'] as unknown,
      });
      const id = (first.body as { id: number }).id;
      const stored = {
        status: 201,
        contentType: 'application/json; charset=utf-8',
        retryAfter: undefined,
        body: { ref, id },
      };
      expect({ first: answer(first), duplicate: answer(duplicate) }).toEqual({
        first: { ...stored, replayed: undefined },
        duplicate: { ...stored, replayed: 'true' },
      });
    });

    it('control: no failure, no retry', async () => {
      failOnce = false;
      const ref = `once-${adapter}`;
      const seen = await check(ref);
      const id = (seen.first.body as { id: number }).id;
      const answer = {
        status: 201,
        contentType: 'application/json; charset=utf-8',
        retryAfter: undefined,
        body: { ref, id },
      };
      expect(seen).toEqual({ first: answer, calls: 1, again: answer });
    });
  },
);
