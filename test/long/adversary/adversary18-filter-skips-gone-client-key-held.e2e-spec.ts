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
import { type IncomingMessage, request as httpRequest } from 'node:http';
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
 * What the app does (the pool seam, Express, `leaseMs: 600`, the heartbeat on as by default):
 * a global exception filter that, like nginx's 499 "client closed request", does not answer a
 * client that is gone (`request.socket.destroyed`): it logs and returns. The handler records a
 * payment attempt, calls the slow payment provider and, the card being declined, throws 422.
 * The client (its own timeout: 150 ms here) closes its connection meanwhile, then retries
 * later with the same key, as any client does after a timeout.
 *
 * What happens: since round 17 (f5524e7) the handler's error keeps the heartbeat running
 * "until the app's exception filters write its answer"; this filter writes none, and the
 * client-gone rule (`leftMidStream`) only covers a stream or an `@Res()` handler. Nothing ever
 * stops the heartbeat: the key is held for ever (every retry, seconds or hours later, gets 409
 * key_in_progress), and the request's transaction stays idle in transaction for ever with the
 * handler's write, holding a pool connection (and the handler's row locks).
 *
 * What should happen (README: "no hang that holds a key"; options.md `heartbeat`: the lease is
 * renewed "while the handler runs and until its answer is written", so that "a slow but live
 * worker keeps it"; transactions.md's failure table for a client that closes mid-stream:
 * "lease released at once (not held by the heartbeat, its connection not left idle in
 * transaction)"): a request whose handler has settled and whose client is gone holds nothing
 * for ever: the retry gets the 422 (stored, or the handler run again), and no connection is
 * left idle in transaction (that connection is left idle in transaction with the heartbeat
 * off too, an older leak this file does not assert: the lease then runs out, the key does not
 * stay held). The controls: the same route with the client waiting (422, replayed);
 * the same trigger with `heartbeat: false` (the lease runs out, the retry gets its 422).
 *
 * Why it matters: a permanent 409 for a key (the client can never learn the outcome) and a
 * pool connection lost per occurrence: enough of them exhaust the pool. Likelihood: low to
 * medium (a filter that skips dead clients is a known idiom; an async filter whose error
 * tracker rejects, with an unhandled-rejection handler keeping the process up, is the same).
 */
let pool: Pool;
let providerCalls = 0;
const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

@Catch(HttpException)
class ClientClosedFilter implements ExceptionFilter {
  catch(error: HttpException, host: ArgumentsHost) {
    const http = host.switchToHttp();
    if (http.getRequest<IncomingMessage>().socket.destroyed) return; // 499: nobody to answer
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
  @Post('payments')
  @Idempotent({ leaseMs: 600 })
  pay(@Body() body: { item: string }) {
    return pay(body.item);
  }

  @Post('payments-no-heartbeat')
  @Idempotent({ leaseMs: 600, heartbeat: false })
  payWithoutHeartbeat(@Body() body: { item: string }) {
    return pay(body.item);
  }
}

@Module({
  imports: [IdempotencyModule.forRootAsync({ useFactory: () => ({ globalKeys: true, pool }) })],
  controllers: [PaymentsController],
  providers: [{ provide: APP_FILTER, useClass: ClientClosedFilter }],
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

describe('adversary 18: a filter that does not answer a gone client leaves the key held for ever', () => {
  let fixture: PoolApp;

  beforeAll(async () => {
    fixture = await startPoolApp('adv18_filter_gone_client', {
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
    if (!fixture) return;
    // The stuck request holds its pool client for ever (pool.end() would wait for it).
    await fixture.app.close();
    await fixture.admin.query(
      `SELECT pg_terminate_backend(pid) FROM pg_stat_activity
        WHERE datname = current_database() AND pid <> pg_backend_pid()`,
    );
    await Promise.race([fixture.close(), sleep(5000)]);
    await fixture.admin.end().catch(() => undefined);
    await fixture.database.drop().catch(() => undefined);
  }, 30_000);

  const send = (path: string, key: string, item: string) =>
    request(fixture.app.getHttpServer()).post(path).set('Idempotency-Key', key).send({ item });

  it('the client waits: 422, replayed (control)', async () => {
    providerCalls = 0;
    const first = await send('/payments', 'key-stay', 'stay');
    const retry = await send('/payments', 'key-stay', 'stay');
    expect({ first: first.status, retry: retry.status, providerCalls }).toEqual({
      first: 422,
      retry: 422,
      providerCalls: 1,
    });
  }, 20_000);

  it('the client leaves, heartbeat off: the lease runs out, the retry gets its 422 (control)', async () => {
    await sendAndLeave(fixture, '/payments-no-heartbeat', 'key-nohb', 'nohb', 150);
    await sleep(2000);
    const retry = await send('/payments-no-heartbeat', 'key-nohb', 'nohb');
    expect(retry.status).toBe(422);
  }, 20_000);

  it('the client leaves: its retry later is not refused with 409 for ever', async () => {
    await sendAndLeave(fixture, '/payments', 'key-gone', 'gone', 150);
    await sleep(3000); // five leases
    const retry = await send('/payments', 'key-gone', 'gone');
    await sleep(3000);
    const again = await send('/payments', 'key-gone', 'gone');
    // Observed: retry 409, again 409 (key_in_progress), the first request's connection still
    // idle in transaction.
    expect({ retry: retry.status, again: again.status }).toEqual({ retry: 422, again: 422 });
  }, 20_000);
});
