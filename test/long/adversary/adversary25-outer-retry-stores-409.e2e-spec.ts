import {
  Body,
  type CallHandler,
  Controller,
  type ExecutionContext,
  type INestApplication,
  Injectable,
  Module,
  type NestInterceptor,
  Post,
  ServiceUnavailableException,
} from '@nestjs/common';
import { APP_INTERCEPTOR } from '@nestjs/core';
import { type Observable, retry } from 'rxjs';
import { type Pool } from 'pg';
import request from 'supertest';
import { IdempotencyModule, Idempotent } from '../../../lib/index.js';
import { type PoolApp, startPoolApp } from '../../support/pool-app.js';

/**
 * Adversary, round 25: a global retry interceptor (outside `@Idempotent()`) re-runs the
 * library's interceptor after the handler's transient error; the second run meets the key its
 * own first run still holds and answers 409 `key_in_progress`, and the first run, which waits
 * for its handler's error answer to be written, takes that 409 as the handler's error and
 * STORES it: the key is `done` with "still being processed; retry later" for its retention.
 * Every retry replays the 409, the charge is never made, and the client, told to retry, does.
 *
 * What the app does (Express, pool): a global `APP_INTERCEPTOR` that retries transient
 * failures, `next.handle().pipe(retry({ count: 2, delay: 50 }))` (the usual RxJS recipe; Nest's
 * interceptor chain re-runs the inner interceptors on resubscription). `POST /charges`
 * (`@Idempotent()`) inserts the charge and calls the processor, which is down once
 * (`ServiceUnavailableException`). The client retries with its key after the lease.
 *
 * What happens: attempt 1's handler throws; run-owned.ts:303-312 keeps the claim (heartbeat on,
 * `settle(true)`) and sets `handlerError`, waiting for the filters to write the error. The
 * retry interceptor swallows the error and resubscribes: `IdempotencyInterceptor.intercept`
 * (lib/idempotency.interceptor.ts:107, 174) runs again for the same request, its claim finds the key held (by attempt 1) and answers
 * 409 `key_in_progress` on the same response. Attempt 1's hold (run-owned.ts:169-175) sees a
 * written answer with `handlerError` set and commits it as the handler's error answer
 * (`commitAnswer(..., failed=true)`): state `done`, response_code 409.
 *
 * What should happen: "409 while a lease is held" is a passing answer, never a stored one;
 * after the error the app's retry either runs the handler again under the same claim, or the
 * request ends with an unstored answer and the key is given back (or its 503 stored): the
 * client's retry with the key after the processor recovered gets a final answer (201 and one
 * charge, as the same route without `@Idempotent()` gives, or the 503 stored, no charge), never
 * a replayed 409. The control: the same route when the processor is up.
 *
 * Why it matters: a payment whose first try hit a transient error can never be completed
 * with its key; the stored answer tells the client to retry, for ever (retention).
 * Severity: high (a wrong stored answer: a lost effect behind a permanent "retry later").
 */
let pool: Pool;
let failuresLeft = 0;
const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

@Injectable()
class RetryInterceptor implements NestInterceptor {
  intercept(_context: ExecutionContext, next: CallHandler): Observable<unknown> {
    return next.handle().pipe(retry({ count: 2, delay: 50 }));
  }
}

async function charge(amount: number): Promise<{ id: number }> {
  const { rows } = await pool.query<{ id: number }>(
    'INSERT INTO charges (amount) VALUES ($1) RETURNING id',
    [amount],
  );
  if (failuresLeft > 0) {
    failuresLeft--;
    throw new ServiceUnavailableException('the card processor is unavailable');
  }
  return { id: rows[0].id };
}

@Controller()
class ChargesController {
  @Post('charges')
  @Idempotent()
  create(@Body() body: { amount: number }): Promise<{ id: number }> {
    return charge(body.amount);
  }

  /** The same route without the library (control). */
  @Post('plain-charges')
  createPlain(@Body() body: { amount: number }): Promise<{ id: number }> {
    return charge(body.amount);
  }
}

@Module({
  imports: [
    IdempotencyModule.forRootAsync({
      useFactory: () => ({ globalKeys: true, pool, leaseMs: 1_000 }),
    }),
  ],
  controllers: [ChargesController],
  providers: [{ provide: APP_INTERCEPTOR, useClass: RetryInterceptor }],
})
class ChargesModule {}

describe('adversary 25: a retry interceptor outside @Idempotent() stores 409 key_in_progress', () => {
  let fixture: PoolApp;
  let app: INestApplication;

  beforeAll(async () => {
    fixture = await startPoolApp('adv25_outer_retry_409', {
      module: ChargesModule,
      max: 4,
      usePool: (started) => {
        pool = started;
      },
      setup: async (admin) => {
        await admin.query('CREATE TABLE charges (id serial PRIMARY KEY, amount int NOT NULL)');
      },
    });
    app = fixture.app;
  }, 60_000);

  afterAll(async () => {
    await fixture?.close();
  });

  const send = (path: string, key: string, amount: number) =>
    request(app.getHttpServer())
      .post(path)
      .set('Idempotency-Key', key)
      .timeout(10_000)
      .send({ amount });
  const charges = async (amount: number) =>
    (
      (
        await fixture.admin.query('SELECT count(*)::int AS n FROM charges WHERE amount = $1', [
          amount,
        ])
      ).rows[0] as { n: number }
    ).n;

  it('control: without the library, the retry interceptor recovers the transient failure', async () => {
    failuresLeft = 1;
    const first = await send('/plain-charges', 'plain-1', 11);
    expect(first.status).toBe(201);
    // No transaction without the library: the failed attempt's insert stays too.
    expect(await charges(11)).toBe(2);
  });

  it.each([
    ['the processor is up: control', 0, 21],
    ['the processor fails once', 1, 22],
  ])(
    '%s: the retry with the key gets the charge',
    async (_name, failures, amount) => {
      failuresLeft = failures;
      const first = await send('/charges', `charge-${amount}`, amount);
      await sleep(1_500); // past the lease: nothing of the first try holds the key
      failuresLeft = 0;
      const retried = await send('/charges', `charge-${amount}`, amount);
      const key = await fixture.admin.query(
        'SELECT state, response_code FROM idempotency_keys WHERE key = $1',
        [`charge-${amount}`],
      );
      // Observed when it fails once: first 409 key_in_progress (its own second run), retry
      // 409 key_in_progress (a replay), the key done with response_code 409, no charge.
      const stored = key.rows[0] as { state: string; response_code: number };
      expect({
        first: failures === 0 ? first.status : 'any',
        retry: retried.status === 409 ? 409 : 'a final answer',
        code: (retried.body as { code?: string }).code ?? 'none',
        stored: stored.response_code === 409 ? 409 : 'its own answer',
        // One charge with a 201; none with a (stored) 503.
        charges: (await charges(amount)) === (retried.status === 201 ? 1 : 0),
      }).toEqual({
        first: failures === 0 ? 201 : 'any',
        retry: 'a final answer',
        code: failures === 0 ? 'none' : expect.not.stringMatching(/^key_in_progress$/),
        stored: 'its own answer',
        charges: true,
      });
    },
    20_000,
  );
});
