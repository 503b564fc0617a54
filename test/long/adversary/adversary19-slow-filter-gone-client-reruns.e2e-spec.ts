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
import { request as httpRequest } from 'node:http';
import { type AddressInfo } from 'node:net';
import { type Pool } from 'pg';
import request from 'supertest';
import { IdempotencyModule, Idempotent } from '../../../lib/index.js';
import { type PoolApp, startPoolApp } from '../../support/pool-app.js';

/** Express' response, as far as this filter uses it (no @types/express here). */
interface Response {
  status(code: number): { json(body: unknown): void };
}

/**
 * Adversary, round 19: a slow exception filter (an error tracker awaited, round 17's shape)
 * that DOES write the handler's error: when the client left before it wrote, the key is given
 * back anyway (round 18's rule for a filter that writes nothing), the error's answer it writes
 * then is not stored, and the retry runs the handler again: its provider call is made twice.
 *
 * What the app does (the pool seam, Express): a payment route calls the payment provider, which
 * declines the card; the handler throws a 422. A global exception filter reports every error to
 * an error tracker and awaits it (a Sentry-style flush, 1 s here) before it writes the error's
 * JSON, as round 17's slow-filter-loses-lease did (the library renews the lease for it). The
 * client has a 300 ms timeout: it gives up, closes its connection, and retries with the same
 * key a little later, as a client with a timeout does.
 *
 * What happens: run-owned.ts' `leftMidStream` gives back any handler error (`erred`) whose
 * client is gone before its answer is written, whether the filter will write or not: on the
 * `setImmediate` check after the handler's error (or on `close`, the filter still awaiting)
 * the work is rolled back, the key released. The
 * filter then writes its 422, which `holdResponse` lets through unstored (`gaveBack`). The
 * retry finds no answer, runs the handler again, and the provider is called a second time
 * (a second charge attempt, a second declined-card notice...).
 *
 * What should happen: transactions.md: the handler's own error is "its answer once the app's
 * exception filters write it", stored without its effects; the give-back is stated only for
 * "an exception filter that writes nothing to a client that is gone (the "499" idiom)". This
 * filter writes. The promise: a retry gets the stored answer byte for byte, the effects run
 * once. The controls pass: the same slow filter with a client that waits (422 stored and
 * replayed, one provider call), and a client that leaves while the handler runs with a filter
 * that writes at once (422 stored, one provider call).
 *
 * Why it matters: external effects (the provider call the library's stored error exists to
 * protect) are repeated. Medium: awaited error trackers in filters are common, and a client
 * timing out and retrying is exactly the situation idempotency keys are for; the slower the
 * tracker, the more likely.
 */
let pool: Pool;
let providerCalls = 0;
const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

@Catch(HttpException)
class TrackedFilter implements ExceptionFilter {
  async catch(error: HttpException, host: ArgumentsHost) {
    const http = host.switchToHttp();
    const slow = http.getRequest<{ url: string }>().url.includes('slow');
    if (slow) await sleep(1000); // the error tracker, awaited
    http.getResponse<Response>().status(error.getStatus()).json({ error: error.message });
  }
}

async function pay(item: string): Promise<never> {
  await pool.query('INSERT INTO attempts (item) VALUES ($1)', [item]);
  await sleep(400); // the payment provider
  providerCalls += 1;
  throw new UnprocessableEntityException('card declined');
}

@Controller()
class PaymentsController {
  @Post('slow/payments')
  @Idempotent()
  paySlow(@Body() body: { item: string }) {
    return pay(body.item);
  }

  @Post('fast/payments')
  @Idempotent()
  payFast(@Body() body: { item: string }) {
    return pay(body.item);
  }
}

@Module({
  imports: [IdempotencyModule.forRootAsync({ useFactory: () => ({ globalKeys: true, pool }) })],
  controllers: [PaymentsController],
  providers: [{ provide: APP_FILTER, useClass: TrackedFilter }],
})
class PaymentsModule {}

/** Sends the request and closes the connection `afterMs` later, before the answer. */
function sendAndLeave(fixture: PoolApp, path: string, key: string, item: string, afterMs: number) {
  const server = fixture.app.getHttpServer() as { address(): AddressInfo };
  return new Promise<void>((resolve) => {
    const req = httpRequest({
      host: '127.0.0.1',
      port: server.address().port,
      method: 'POST',
      path,
      headers: { 'content-type': 'application/json', 'idempotency-key': key },
    });
    req.on('error', () => undefined);
    req.on('response', (res) => res.resume());
    req.end(JSON.stringify({ item }));
    setTimeout(() => {
      req.destroy();
      resolve();
    }, afterMs);
  });
}

describe('adversary 19: a slow filter that writes, its client gone: the handler runs twice', () => {
  let fixture: PoolApp;

  beforeAll(async () => {
    fixture = await startPoolApp('adv19_slow_filter_gone', {
      module: PaymentsModule,
      max: 4,
      usePool: (started) => {
        pool = started;
        pool.on('connect', (client) => client.on('error', () => undefined));
      },
      setup: async (admin) => {
        await admin.query('CREATE TABLE attempts (id serial PRIMARY KEY, item text NOT NULL)');
      },
    });
    await fixture.app.listen(0, '127.0.0.1');
  }, 60_000);

  afterAll(async () => {
    await fixture?.close();
  });

  const send = (path: string, key: string, item: string) =>
    request(fixture.app.getHttpServer()).post(path).set('Idempotency-Key', key).send({ item });

  it('slow filter, the client waits: 422 stored, replayed, one provider call (control)', async () => {
    providerCalls = 0;
    const first = await send('/slow/payments', 'key-wait', 'wait');
    const retry = await send('/slow/payments', 'key-wait', 'wait');
    expect({
      first: first.status,
      retry: retry.status,
      replayed: retry.headers['idempotent-replayed'],
      providerCalls,
    }).toEqual({ first: 422, retry: 422, replayed: 'true', providerCalls: 1 });
  }, 20_000);

  it('fast filter, the client leaves while the handler runs: 422 stored, one call (control)', async () => {
    providerCalls = 0;
    await sendAndLeave(fixture, '/fast/payments', 'key-fast', 'fast', 300);
    await sleep(1500);
    const retry = await send('/fast/payments', 'key-fast', 'fast');
    expect({
      retry: retry.status,
      replayed: retry.headers['idempotent-replayed'],
      providerCalls,
    }).toEqual({ retry: 422, replayed: 'true', providerCalls: 1 });
  }, 20_000);

  it('slow filter, the client leaves (300 ms timeout): the retry replays the 422, one call', async () => {
    providerCalls = 0;
    await sendAndLeave(fixture, '/slow/payments', 'key-gone', 'gone', 300);
    await sleep(2000); // the handler and its filter are done
    const retry = await send('/slow/payments', 'key-gone', 'gone');
    // Observed: { retry: 422, replayed: undefined, providerCalls: 2 }: the key was given back
    // when the client left, the filter's 422 not stored, the handler run again.
    expect({
      retry: retry.status,
      replayed: retry.headers['idempotent-replayed'],
      providerCalls,
    }).toEqual({ retry: 422, replayed: 'true', providerCalls: 1 });
  }, 20_000);
});
