import {
  type ArgumentsHost,
  Catch,
  Controller,
  type ExceptionFilter,
  Get,
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
 * Adversary, round 23: on a `oneCommit` route, a handler's error whose client left before the
 * filter wrote (the "499" idiom) keeps its pooled connection idle in transaction for the
 * route's whole lease: a few impatient clients starve the app's pool for seconds.
 *
 * What the app does (Express, pool of 3, the library on the same pool): `POST
 * /withdraw/:account` with `@Idempotent({ leaseMs: 4000, oneCommit: true })` (local work only,
 * as transactions.md's "One commit per new key" recommends) updates the account, calls the
 * risk check (300 ms) and throws 422 when refused. The app's exception filter skips clients
 * that are gone (`if (request.socket.destroyed) return;`, the nginx 499 idiom, the very case
 * transactions.md's row names). Three mobile clients give up after 150 ms. Then any request
 * that touches the database (`GET /balance/:account`, not idempotent at all) comes.
 *
 * What happens: run-owned.ts:228-237 (`leftMidStream`): the error unwritten with its client gone,
 * `withoutEffects` (lib/transaction/commit-answer.ts:79-85) on a oneCommit transaction only
 * `ROLLBACK TO SAVEPOINT` (request-transaction.ts:316-327): the transaction, its uncommitted
 * claim and its connection stay open, idle, until `leftMidStream(true)` `leaseMs` later.
 * Three such requests hold the pool's three connections for 4 s: the next request of the app
 * waits ~3.5 s for one (a 503 with a pool `connectionTimeoutMillis` below that). The same
 * route without `oneCommit` (the control) rolls back and gives the connection back at once.
 *
 * What should happen: transactions.md's failure table, "the client is gone before the exception
 * filter answered the handler's error": "the handler's effects rolled back at once (its locks
 * freed)"; the row above it for an abandoned stream: "its connection not left idle in
 * transaction". "The connection is held from the claim to the answer": here there is no answer
 * (nobody to write to), only the lease's wait for a filter that already returned. The
 * effects are undone; nothing needs a connection for that wait (the claim was never
 * committed, so a retry finding no row would run it again, as after a crash).
 *
 * Why it matters: clients that give up (mobile networks, load balancer timeouts) during an
 * error are common, and on a oneCommit route each one pins a connection for `leaseMs` (5 s
 * by default, a minute on slow routes): a burst of them empties the pool and stalls every
 * route of the app, idempotent or not. Severity: medium (availability; no double effect).
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

  @Post('withdraw-one/:account')
  @Idempotent({ leaseMs: 4_000, oneCommit: true })
  async withdrawOne(@Param('account') account: string) {
    await pool.query('UPDATE accounts SET balance = balance - 100 WHERE id = $1', [account]);
    await sleep(300); // the risk check (local)
    throw new UnprocessableEntityException('refused by risk');
  }

  @Get('balance/:account')
  async balance(@Param('account') account: string) {
    const { rows } = await pool.query<{ balance: number }>(
      'SELECT balance FROM accounts WHERE id = $1',
      [account],
    );
    return rows[0];
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

describe('adversary 23: oneCommit, the 499 idiom pins a pooled connection per request for the lease', () => {
  let fixture: PoolApp;

  beforeAll(async () => {
    fixture = await startPoolApp('adv23_one_commit_499', {
      module: AccountsModule,
      max: 3,
      usePool: (started) => {
        pool = started;
        pool.on('connect', (client) => client.on('error', () => undefined));
      },
      setup: async (admin) => {
        await admin.query('CREATE TABLE accounts (id text PRIMARY KEY, balance int NOT NULL)');
        await admin.query("INSERT INTO accounts VALUES ('a', 1000), ('b', 1000), ('c', 1000)");
      },
    });
    await fixture.app.listen(0, '127.0.0.1');
  }, 60_000);

  afterAll(async () => {
    await fixture?.close();
  });

  it.each([
    ['withdraw', 'default route: control'],
    ['withdraw-one', 'oneCommit route'],
  ])(
    '%s (%s): three clients leave during the error; the app still answers at once',
    async (route) => {
      await Promise.all(
        ['a', 'b', 'c'].map((account) =>
          sendAndLeave(fixture, `/${route}/${account}`, `${route}-${account}`, 150),
        ),
      );
      await sleep(700); // the handlers have thrown by now (300 ms), their filters run
      const idle = await fixture.admin.query(
        "SELECT count(*)::int AS n FROM pg_stat_activity WHERE state = 'idle in transaction' AND datname = current_database()",
      );
      const started = Date.now();
      const answer = await request(fixture.app.getHttpServer()).get('/balance/a').timeout(10_000);
      const ms = Date.now() - started;
      // Observed for oneCommit: 3 sessions idle in transaction; GET answered after ~3.3 s.
      expect({
        idleInTransaction: (idle.rows[0] as { n: number }).n,
        status: answer.status,
        fast: ms < 1_500,
      }).toEqual({ idleInTransaction: 0, status: 200, fast: true });
      await sleep(4_500); // every key given back, connections free again for the next case
    },
    30_000,
  );
});
