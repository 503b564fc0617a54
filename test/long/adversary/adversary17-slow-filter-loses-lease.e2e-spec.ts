import {
  type ArgumentsHost,
  Body,
  Catch,
  Controller,
  type ExceptionFilter,
  HttpException,
  Module,
  Post,
  UnprocessableEntityException,
} from '@nestjs/common';
import { APP_FILTER } from '@nestjs/core';
import { type Pool } from 'pg';
import request from 'supertest';
import { IdempotencyModule, Idempotent } from '../../../lib/index.js';
import { type PoolApp, startPoolApp } from '../../support/pool-app.js';

/** Express' response, as far as this filter uses it (no @types/express here). */
interface Response {
  status(code: number): { json(body: unknown): void };
}

/**
 * What the app does (the pool seam, Express, `leaseMs: 600`, the heartbeat on as by default):
 * a global exception filter reports each error to the app's error tracker and waits for it
 * (`await tracker.capture(error)`, 1.5 s this time: the tracker is slow) before it writes the
 * error answer, a common shape of an async filter. The handler writes a payment attempt,
 * calls the payment provider (counted here) and, the card being declined, throws 422. The
 * client's retry (same key) comes while the filter still reports the first error.
 *
 * What happens: the handler's error settles it (run-owned.ts `settle()` with no value), which
 * stops the heartbeat "at once on an error", though the request still holds its key and its
 * transaction until the filter writes its answer. The lease runs out during the report; the
 * retry takes the live key over as if its worker had died and runs the handler a second time
 * (a second charge attempt at the provider); the first request, finishing after it, is
 * answered 409 lease_lost in place of its 422.
 *
 * What should happen (options.md `heartbeat`: "Extend the lease ... while the handler runs and
 * until its answer is written"; the lease exists for workers that died): the retry during the
 * report gets 409 key_in_progress, the first gets its 422, the handler (and the provider) runs
 * once, and the later retries replay the 422. The control, the same slow step in the handler
 * before it throws, keeps the key (the heartbeat runs while the handler does).
 *
 * Why it matters: the same break as adversary 16's heartbeat-stops-before-answer, fixed for a
 * value in round 17, remains on the error path: any slow exception filter (error tracker,
 * i18n of messages, an audit of failures) longer than the lease hands a live key to a retry,
 * which repeats the handler's outside effects. Medium.
 */
let pool: Pool;
let providerCalls = 0;
const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

@Catch(HttpException)
class ReportingFilter implements ExceptionFilter {
  async catch(error: HttpException, host: ArgumentsHost) {
    const request = host.switchToHttp().getRequest<{ url: string }>();
    if (request.url === '/payments') await sleep(1500); // await tracker.capture(error)
    host
      .switchToHttp()
      .getResponse<Response>()
      .status(error.getStatus())
      .json({ error: error.message });
  }
}

@Controller()
class PaymentsController {
  @Post('payments')
  @Idempotent()
  async pay(@Body() body: { item: string }) {
    await pool.query('INSERT INTO attempts (item) VALUES ($1)', [body.item]);
    providerCalls += 1; // the payment provider: declined
    throw new UnprocessableEntityException('card declined');
  }

  @Post('payments-slow-handler')
  @Idempotent()
  async paySlowly(@Body() body: { item: string }) {
    await sleep(1500); // the same slow step, in the handler
    await pool.query('INSERT INTO attempts (item) VALUES ($1)', [body.item]);
    providerCalls += 1;
    throw new UnprocessableEntityException('card declined');
  }
}

@Module({
  imports: [
    IdempotencyModule.forRootAsync({
      useFactory: () => ({ globalKeys: true, pool, leaseMs: 600 }),
    }),
  ],
  controllers: [PaymentsController],
  providers: [{ provide: APP_FILTER, useClass: ReportingFilter }],
})
class PaymentsModule {}

describe('adversary 17: the heartbeat stops at a handler error, before a slow filter answers', () => {
  let fixture: PoolApp;

  beforeAll(async () => {
    fixture = await startPoolApp('adv17_slow_filter', {
      module: PaymentsModule,
      usePool: (started) => (pool = started),
      setup: async (admin) => {
        await admin.query('CREATE TABLE attempts (id serial PRIMARY KEY, item text NOT NULL)');
      },
    });
  }, 60_000);

  afterAll(() => fixture?.close());

  const send = (path: string, item: string) =>
    request(fixture.app.getHttpServer())
      .post(path)
      .set('Idempotency-Key', `key-${item}`)
      .send({ item });

  it('the slow step in the handler: the key is kept, the provider called once (control)', async () => {
    providerCalls = 0;
    const first = send('/payments-slow-handler', 'gadget').then((answer) => answer);
    await sleep(1100);
    const retry = await send('/payments-slow-handler', 'gadget');
    const answered = await first;
    const later = await send('/payments-slow-handler', 'gadget');
    expect({
      first: answered.status,
      retry: retry.status,
      later: later.status,
      providerCalls,
    }).toEqual({ first: 422, retry: 409, later: 422, providerCalls: 1 });
  }, 20_000);

  it('a retry while the filter reports gets 409 key_in_progress; the provider is called once', async () => {
    providerCalls = 0;
    const first = send('/payments', 'widget').then((answer) => answer);
    await sleep(1100);
    const retry = send('/payments', 'widget').then((answer) => answer);
    const [answered, retried] = await Promise.all([first, retry]);
    const later = await send('/payments', 'widget');
    // Observed: first 409 (lease_lost), retry 422 (ran again), providerCalls 2.
    expect({
      first: answered.status,
      retry: retried.status,
      later: later.status,
      providerCalls,
    }).toEqual({ first: 422, retry: 409, later: 422, providerCalls: 1 });
  }, 20_000);
});
