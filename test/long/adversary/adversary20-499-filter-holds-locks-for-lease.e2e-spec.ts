import {
  type ArgumentsHost,
  Catch,
  Controller,
  type ExceptionFilter,
  HttpException,
  Module,
  Param,
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

/**
 * Adversary, round 20: the "499" idiom (an exception filter that writes nothing to a client
 * that is gone) now holds the key, the request's transaction and the handler's row locks for
 * the route's whole lease (9ed56f6's grace for slow filters), where transactions.md's failure
 * table says "lease released at once (not held by the heartbeat, its connection not left idle
 * in transaction)" and "runs it again".
 *
 * What the app does (Express, pool): `POST /withdraw/:account` (`@Idempotent({ leaseMs:
 * 4000 })`, a route known to be slow) locks the account's row (`UPDATE accounts ...`), calls
 * the risk service (300 ms), and throws 422 when it refuses. The app's exception filter skips
 * clients that are gone, the nginx "499" idiom (`if (request.socket.destroyed) return;`), as
 * writing to a closed socket only logs errors. A mobile client gives up after 150 ms; the
 * next request on the same account (another key, the user's next try) and the client's own
 * retry come 400 ms after the first ended.
 *
 * What happens: run-owned.ts:200-207: the handler's error with its client gone and nothing
 * written is given `claim.leaseMs` (a `setTimeout`, the heartbeat renewing meanwhile) before
 * `leftMidStream(true)` rolls it back. For those 4 s the request's transaction stays open,
 * idle, holding the row lock of its `UPDATE`: the next withdrawal on that account waits for
 * it (about 3.5 s here; with a `lock_timeout`, a 503), and the retry with the same key gets
 * 409 `key_in_progress` instead of running.
 *
 * Fixed: the handler's effects are rolled back as soon as its client is found gone with its
 * error unwritten (its answer is stored without them anyway): the row lock is freed at once.
 * The key stays held for one lease (a slow filter may still write the error, to be stored:
 * adversary 19), its retry answered 409 meanwhile; transactions.md's row says so now.
 *
 * What should happen: transactions.md's failure table, last row ("before an exception filter
 * that writes nothing to a client that is gone (the "499" idiom) answered the handler's
 * error"): "rolled back, nothing stored, lease released at once (not held by the heartbeat,
 * its connection not left idle in transaction)", "runs it again". The control (the client
 * waits; the filter writes the 422) frees the lock at once.
 *
 * Why it matters: a request the client abandoned holds the handler's row locks for the whole
 * lease, idle in transaction: one impatient client per account serializes everyone else on
 * that row for seconds (or, with a long `leaseMs` on slow routes, a minute), and a pool whose
 * connections sit idle in transaction runs dry. Severity: medium (the docs promise the
 * opposite; no double effect).
 */
let pool: Pool;
const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

@Catch(HttpException)
class SkipGoneClientsFilter implements ExceptionFilter {
  catch(error: HttpException, host: ArgumentsHost) {
    const http = host.switchToHttp();
    const req = http.getRequest<{ socket: { destroyed: boolean } }>();
    if (req.socket.destroyed) return; // 499: nobody to answer
    http
      .getResponse<{ status(code: number): { json(body: unknown): void } }>()
      .status(error.getStatus())
      .json({ error: error.message });
  }
}

@Controller()
class AccountsController {
  @Post('withdraw/:account')
  @Idempotent({ leaseMs: 4_000 })
  async withdraw(@Param('account') account: string) {
    await pool.query('UPDATE accounts SET balance = balance - 100 WHERE id = $1', [account]);
    await sleep(300); // the risk service
    throw new UnprocessableEntityException('refused by risk');
  }
}

@Module({
  imports: [IdempotencyModule.forRootAsync({ useFactory: () => ({ globalKeys: true, pool }) })],
  controllers: [AccountsController],
  providers: [{ provide: APP_FILTER, useClass: SkipGoneClientsFilter }],
})
class AccountsModule {}

/** Sends the request and closes the connection `afterMs` later, before the answer. */
function sendAndLeave(fixture: PoolApp, path: string, key: string, afterMs: number) {
  const server = fixture.app.getHttpServer() as { address(): AddressInfo };
  return new Promise<void>((resolve) => {
    const req = httpRequest({
      host: '127.0.0.1',
      port: server.address().port,
      method: 'POST',
      path,
      headers: { 'idempotency-key': key },
    });
    req.on('error', () => undefined);
    req.on('response', (res) => res.resume());
    req.end();
    setTimeout(() => {
      req.destroy();
      resolve();
    }, afterMs);
  });
}

describe('adversary 20: the 499 idiom holds the row locks for the whole lease', () => {
  let fixture: PoolApp;

  beforeAll(async () => {
    fixture = await startPoolApp('adv20_499_holds_locks', {
      module: AccountsModule,
      max: 6,
      usePool: (started) => {
        pool = started;
        pool.on('connect', (client) => client.on('error', () => undefined));
      },
      setup: async (admin) => {
        await admin.query('CREATE TABLE accounts (id text PRIMARY KEY, balance int NOT NULL)');
        await admin.query("INSERT INTO accounts VALUES ('waits', 1000), ('leaves', 1000)");
      },
    });
    await fixture.app.listen(0, '127.0.0.1');
  }, 60_000);

  afterAll(async () => {
    await fixture?.close();
  });

  const send = (account: string, key: string) =>
    request(fixture.app.getHttpServer())
      .post(`/withdraw/${account}`)
      .set('Idempotency-Key', key)
      .timeout(10_000);

  const timed = async (account: string, key: string) => {
    const started = Date.now();
    const answer = await send(account, key);
    return { status: answer.status, ms: Date.now() - started };
  };

  it.each([
    ['waits', 'the client waits, the filter writes the 422: control'],
    ['leaves', 'the client leaves, the filter writes nothing (499)'],
  ])(
    '%s (%s): the lock is freed at once; the next request runs at once',
    async (account) => {
      if (account === 'waits') await send(account, `${account}-1`);
      else await sendAndLeave(fixture, `/withdraw/${account}`, `${account}-1`, 150);
      await sleep(600); // the handler has thrown by now (300 ms), and its filter run
      const [next, retry] = await Promise.all([
        timed(account, `${account}-2`),
        timed(account, `${account}-1`),
      ]);
      // Observed for leaves: next { 422, ~3400 ms } (waited on the row lock of the abandoned
      // request, idle in transaction), retry 409 (key_in_progress).
      expect({ status: next.status, fast: next.ms < 1_500 }).toEqual({ status: 422, fast: true });
      if (account === 'waits') return;
      // The key is held for one lease, in case a slow filter still writes (adversary 19's
      // slow-filter-gone-client-reruns): 409 until then; then given back, the retry runs it.
      expect(retry.status).toBe(409);
      await sleep(4_300);
      const later = await send(account, `${account}-1`);
      expect({ status: later.status, replayed: later.headers['idempotent-replayed'] }).toEqual({
        status: 422,
        replayed: undefined,
      });
    },
    20_000,
  );
});
