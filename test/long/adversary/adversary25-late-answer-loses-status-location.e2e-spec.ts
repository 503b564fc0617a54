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
  RequestTimeoutException,
  Res,
  UseInterceptors,
} from '@nestjs/common';
import { catchError, type Observable, throwError, timeout, TimeoutError } from 'rxjs';
import { type Pool } from 'pg';
import request from 'supertest';
import { IdempotencyModule, Idempotent } from '../../../lib/index.js';
import { type PoolApp, startPoolApp } from '../../support/pool-app.js';

/**
 * Adversary, round 25: a late answer (the handler settled after an inner timeout answered for
 * it) is stored with the route's default status and only its `@Header()`s: the status and the
 * `Location` the handler set on `@Res({ passthrough: true })` before its slow step are lost,
 * and every retry replays `201` with no `Location` for an answer that is `202` + `Location`.
 *
 * What the app does (Express, pool): `POST /charges` inserts the charge, marks the answer as
 * asynchronous the usual Nest way, `res.status(202)` and `res.setHeader('Location', ...)` on
 * `@Res({ passthrough: true })`, then calls the card processor (slow this time) and returns
 * the plain object `{ id, state: 'pending' }`. Nest's documented timeout interceptor
 * (`timeout(400)`, `TimeoutError` to `RequestTimeoutException`) is written above
 * `@Idempotent()`, as transactions.md says is supported. The client gets the 408, waits, and
 * retries with its key to learn where to poll.
 *
 * What happens: run-owned.ts:286-297 waits for the handler's Promise and `settleDetached`
 * (lib/http/settle-detached.ts:45-47) renders the value with
 * `renderResult(outcome.value, context.defaultStatus, settings.headers, ...)`
 * (lib/http/handler-result.ts:16-27): the status is the route's default (201 for a POST), the
 * headers only the `@Header()` decorators'. What the handler set on the response (202, the
 * `Location` header, which the library stores by default: STORED_RESPONSE_HEADERS) is not
 * read; the 408 the filter wrote overwrote the status on the raw response anyway. The
 * retries replay `201 {"id":..,"state":"pending"}` without `Location`, for the key's retention.
 *
 * What should happen: transactions.md's failure table: "its effects commit with its own
 * answer" which the retries replay; the handler's own answer is 202 with `Location`, as the
 * control (the same route with a fast processor) answers and replays. Either the status and
 * stored headers the handler set are kept for the late answer, or (as for a class instance)
 * the late answer is not stored and the retry runs again.
 *
 * Why it matters: a client that polls `Location` for an accepted charge gets none, and a
 * 201 tells it the charge is done when the handler said it is pending.
 * Severity: high (a wrong replay, for ever, of a stored answer after a supported timeout).
 */
let pool: Pool;
let retryProcessorMs: number | undefined;
const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

/** The parts of Express's response the handler uses (tests may not import 'express'). */
interface PassthroughResponse {
  status(code: number): unknown;
  setHeader(name: string, value: string): unknown;
}

@Injectable()
class TimeoutInterceptor implements NestInterceptor {
  intercept(_context: ExecutionContext, next: CallHandler): Observable<unknown> {
    return next.handle().pipe(
      timeout(400),
      catchError((error: unknown) =>
        throwError(() => (error instanceof TimeoutError ? new RequestTimeoutException() : error)),
      ),
    );
  }
}

@Controller()
class ChargesController {
  @Post('charges')
  @UseInterceptors(TimeoutInterceptor)
  @Idempotent()
  async create(
    @Body() body: { amount: number; processorMs: number },
    @Res({ passthrough: true }) res: PassthroughResponse,
  ): Promise<{ id: number; state: string }> {
    const { rows } = await pool.query<{ id: number }>(
      'INSERT INTO charges (amount) VALUES ($1) RETURNING id',
      [body.amount],
    );
    const id = rows[0].id;
    // Accepted, to be confirmed: the client polls the charge.
    res.status(202);
    res.setHeader('Location', `/charges/${id}`);
    const processorMs = retryProcessorMs ?? body.processorMs;
    retryProcessorMs = undefined;
    await sleep(processorMs);
    return { id, state: 'pending' };
  }
}

@Module({
  imports: [IdempotencyModule.forRootAsync({ useFactory: () => ({ globalKeys: true, pool }) })],
  controllers: [ChargesController],
  providers: [TimeoutInterceptor],
})
class ChargesModule {}

describe('adversary 25: a late answer loses the status and Location set on @Res({ passthrough })', () => {
  let fixture: PoolApp;
  let app: INestApplication;

  beforeAll(async () => {
    fixture = await startPoolApp('adv25_late_status_location', {
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

  const send = (key: string, amount: number, processorMs: number) =>
    request(app.getHttpServer())
      .post('/charges')
      .set('Idempotency-Key', key)
      .timeout(10_000)
      .send({ amount, processorMs });

  it.each([
    ['fast processor, no timeout: control', 10],
    ['slow processor, the inner timeout fires', 800],
  ])(
    '%s: the retry answers 202 with the Location the handler set',
    async (_name, processorMs) => {
      const amount = 1000 + processorMs;
      retryProcessorMs = undefined;
      const first = await send(`charge-${processorMs}`, amount, processorMs);
      await sleep(1_200); // the handler has settled meanwhile
      retryProcessorMs = 10;
      const retry = await send(`charge-${processorMs}`, amount, processorMs);
      const charges = await fixture.admin.query(
        'SELECT count(*)::int AS n FROM charges WHERE amount = $1',
        [amount],
      );
      // Observed for the slow case: retry 201, no location, replayed.
      expect({
        first: first.status,
        retry: retry.status,
        location: retry.headers['location'] as string | undefined,
        state: (retry.body as { state?: string }).state,
        charges: (charges.rows[0] as { n: number }).n,
      }).toEqual({
        first: processorMs > 400 ? 408 : 202,
        retry: 202,
        location: expect.stringMatching(/^\/charges\/\d+$/) as unknown as string,
        state: 'pending',
        charges: 1,
      });
    },
    20_000,
  );
});
