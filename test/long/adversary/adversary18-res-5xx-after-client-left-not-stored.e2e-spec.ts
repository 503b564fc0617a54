import { Body, Controller, Module, Post, Res } from '@nestjs/common';
import { request as httpRequest } from 'node:http';
import { type AddressInfo } from 'node:net';
import { type Pool } from 'pg';
import request from 'supertest';
import { IdempotencyModule, Idempotent } from '../../../lib/index.js';
import { type PoolApp, startPoolApp } from '../../support/pool-app.js';

/** Express' response, as far as this handler uses it (no @types/express here). */
interface Response {
  status(code: number): { json(body: unknown): void };
}

/**
 * What the app does (the pool seam, Express, defaults otherwise): an `@Res()` handler (it
 * writes its own answer, as many Express-minded Nest handlers do) records a payment attempt,
 * calls the payment provider (slow: 400 ms), and, the provider having failed, records the
 * failure and answers its own `502 {"error":"payment provider failed"}`: the attempt happened
 * and must not be repeated blindly (the provider may have charged). The client's own timeout
 * (150 ms here) closes its connection meanwhile; it retries later with the same key.
 *
 * What happens: the client left while the handler ran (`clientGone`); when the handler then
 * writes its 502, run-owned.ts' rule for "the adapter answered its own failure to send
 * (Fastify's 500 after a premature close)", `clientGone && written.status >= 500 &&
 * settings.responseHandled`, takes the handler's own 502 for the adapter's: rolled back (the
 * attempt and its failure record are gone) and the key given back. The retry runs the handler
 * again: a second call to the payment provider for the same key.
 *
 * What should happen (transactions.md, failure table: "a 5xx the handler chose, `@HttpCode(503)`
 * or a status set on `@Res({ passthrough: true })`, is its answer"; the client-gone row is
 * about the adapter's own 500 and a response that "never ends"; the promise: effects run
 * exactly once): the 502 the handler wrote, whole, is stored with its effects and replayed;
 * the provider is called once. The control, the same request with the client waiting, does
 * exactly that.
 *
 * Why it matters: an external effect repeated (the provider called twice for one key), the one
 * thing the key exists to prevent; and the client leaving before a slow upstream's failure is
 * the usual order of events (its timeout is shorter than the upstream's). Medium.
 */
let pool: Pool;
let providerCalls = 0;
const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

@Controller()
class PaymentsController {
  @Post('payments')
  @Idempotent()
  async pay(@Body() body: { item: string }, @Res() res: Response) {
    await pool.query("INSERT INTO attempts (item, outcome) VALUES ($1, 'sent')", [body.item]);
    await sleep(400);
    providerCalls += 1; // the provider: failed (it may have charged)
    await pool.query("INSERT INTO attempts (item, outcome) VALUES ($1, 'failed')", [body.item]);
    res.status(502).json({ error: 'payment provider failed' });
  }
}

@Module({
  imports: [IdempotencyModule.forRootAsync({ useFactory: () => ({ globalKeys: true, pool }) })],
  controllers: [PaymentsController],
})
class PaymentsModule {}

/** Sends the request and closes the connection `afterMs` later, before the answer. */
function sendAndLeave(fixture: PoolApp, key: string, item: string, afterMs: number) {
  const server = fixture.app.getHttpServer() as { address(): AddressInfo };
  return new Promise<void>((resolve) => {
    const req = httpRequest({
      host: '127.0.0.1',
      port: server.address().port,
      method: 'POST',
      path: '/payments',
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

describe("adversary 18: an @Res() handler's own 5xx, written after its client left, is not stored", () => {
  let fixture: PoolApp;

  beforeAll(async () => {
    fixture = await startPoolApp('adv18_res_5xx_gone', {
      module: PaymentsModule,
      max: 4,
      usePool: (started) => (pool = started),
      setup: async (admin) => {
        await admin.query(
          'CREATE TABLE attempts (id serial PRIMARY KEY, item text NOT NULL, outcome text NOT NULL)',
        );
      },
    });
    await fixture.app.listen(0, '127.0.0.1');
  }, 60_000);

  afterAll(() => fixture?.close());

  const send = (key: string, item: string) =>
    request(fixture.app.getHttpServer())
      .post('/payments')
      .set('Idempotency-Key', key)
      .send({ item });

  const attempts = async (item: string) =>
    (
      await fixture.admin.query('SELECT outcome FROM attempts WHERE item = $1 ORDER BY id', [item])
    ).rows.map((row: { outcome: string }) => row.outcome);

  it('the client waits: 502, replayed, the provider called once (control)', async () => {
    providerCalls = 0;
    const first = await send('key-stay', 'stay');
    const retry = await send('key-stay', 'stay');
    expect({
      first: first.status,
      retry: retry.status,
      body: retry.body as unknown,
      providerCalls,
      attempts: await attempts('stay'),
    }).toEqual({
      first: 502,
      retry: 502,
      body: { error: 'payment provider failed' },
      providerCalls: 1,
      attempts: ['sent', 'failed'],
    });
  }, 20_000);

  it('the client leaves first: its retry replays the 502, the provider called once', async () => {
    providerCalls = 0;
    await sendAndLeave(fixture, 'key-gone', 'gone', 150);
    await sleep(1000); // the handler has answered meanwhile
    const retry = await send('key-gone', 'gone');
    // Observed: retry 502 from a second run: providerCalls 2; the first run's rows rolled back.
    expect({
      retry: retry.status,
      body: retry.body as unknown,
      providerCalls,
      attempts: await attempts('gone'),
    }).toEqual({
      retry: 502,
      body: { error: 'payment provider failed' },
      providerCalls: 1,
      attempts: ['sent', 'failed'],
    });
  }, 20_000);
});
