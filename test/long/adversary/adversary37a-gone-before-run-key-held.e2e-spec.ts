import { request as httpRequest } from 'node:http';
import { type AddressInfo } from 'node:net';
import {
  type ArgumentsHost,
  Body,
  type CanActivate,
  Catch,
  Controller,
  type ExceptionFilter,
  HttpException,
  Injectable,
  Module,
  Post,
  UseGuards,
} from '@nestjs/common';
import { APP_FILTER, HttpAdapterHost } from '@nestjs/core';
import { type Pool } from 'pg';
import request from 'supertest';
import { type AdapterName } from '../../support/bootstrap.js';
import { IdempotencyModule, Idempotent } from '../../../lib/index.js';
import { type PoolApp, startPoolApp } from '../../support/pool-app.js';

/**
 * Adversary, round 37a: the "499" row of docs/guides/transactions.md (the client gone before
 * the exception filter answered the handler's error, a filter that writes nothing to a client
 * that is gone) holds only when the client leaves after the library's run began. A client that
 * left earlier (while an auth guard awaited its server, before any interceptor ran) is never
 * seen gone: the key is held, its lease renewed by the heartbeat, and the handler's transaction
 * left open (its effects not undone, its locks and connection held), for the process's life.
 * Every retry gets 409.
 *
 * The app: `POST /payments` (`@Idempotent({ leaseMs: 1000 })`) behind a guard that asks an
 * auth server (150 ms); it inserts a row, asks the provider (200 ms), which declines (402,
 * final). A global `@Catch()` filter in the "499" idiom writes nothing to a client whose
 * socket is gone. The client (a mobile app) gives up after 50 ms and retries later.
 *
 * What happens: the client's socket closes during the guard; the response's `close` is emitted
 * then. The library's run starts afterwards and listens for it with `raw.once('close', ...)`
 * (lib/http/run-owned.ts:270-274), which never fires again: `clientGone` stays false. The handler
 * fails; the filter writes nothing; `leftMidStream` (run-owned.ts:246-268, called at :394)
 * returns at once (`!clientGone`): no `undoEffectsNow`, no lease's grace, no give-back. The
 * failed run settled `untilWritten` (run-owned.ts:362, :333-336): the heartbeat renews the key
 * until an answer that will never be written. Its transaction stays idle in transaction.
 *
 * Expected (the guide's row): the handler's effects rolled back at once, the key held one lease,
 * then given back; the retry after it runs the handler (201), nothing left open.
 *
 * Control: the same app, the client leaving while the handler runs (after the run began): the
 * row holds.
 *
 * (afterAll kills the held run's connection: jest may report it as an unhandled pg error,
 * "Test suite failed to run", a symptom of the break, gone with it.)
 *
 * Severity: high (a key refused 409 for ever after a client timeout, an ordinary event; a
 * transaction and pooled connection held per such request, its row locks with it).
 */
let pool: Pool;
let declines = 1;
let calls = 0;
const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

/** Asks the auth server (slow). */
@Injectable()
class AuthGuard implements CanActivate {
  async canActivate() {
    await sleep(150);
    return true;
  }
}

/** Answers errors as Nest would, and nothing to a client that is gone (the "499" idiom). */
@Catch()
class GoneClientFilter implements ExceptionFilter {
  constructor(private readonly adapterHost: HttpAdapterHost) {}
  catch(error: unknown, host: ArgumentsHost) {
    const req = host.switchToHttp().getRequest<{ raw?: { socket: { destroyed: boolean } } }>();
    const socket = (req.raw ?? (req as unknown as { socket: { destroyed: boolean } })).socket;
    if (socket.destroyed) return;
    const status = error instanceof HttpException ? error.getStatus() : 500;
    const body = error instanceof HttpException ? error.getResponse() : { message: 'error' };
    this.adapterHost.httpAdapter.reply(host.switchToHttp().getResponse(), body, status);
  }
}

@Controller()
class PaymentsController {
  @Post('payments')
  @UseGuards(AuthGuard)
  @Idempotent({ leaseMs: 1000 })
  async pay(@Body() body: { ref: string }) {
    calls += 1;
    await pool.query('INSERT INTO payments (ref) VALUES ($1)', [body.ref]);
    await sleep(200); // the provider
    if (declines > 0) {
      declines -= 1;
      throw new HttpException({ code: 'card_declined' }, 402);
    }
    return { ref: body.ref };
  }
}

@Module({
  imports: [IdempotencyModule.forRootAsync({ useFactory: () => ({ globalKeys: true, pool }) })],
  controllers: [PaymentsController],
  providers: [{ provide: APP_FILTER, useClass: GoneClientFilter }],
})
class PaymentsModule {}

/** Posts and gives up after `abortMs` (the socket destroyed): resolves then. */
function postAndLeave(port: number, ref: string, abortMs: number): Promise<void> {
  return new Promise((resolve) => {
    const body = JSON.stringify({ ref });
    const req = httpRequest({
      host: '127.0.0.1',
      port,
      method: 'POST',
      path: '/payments',
      headers: {
        'content-type': 'application/json',
        'content-length': Buffer.byteLength(body),
        'idempotency-key': ref,
      },
    });
    req.on('error', () => undefined);
    req.end(body);
    setTimeout(() => {
      req.destroy();
      resolve();
    }, abortMs);
  });
}

describe.each<AdapterName>(['express', 'fastify'])(
  'adversary 37a (%s): a client gone before the run began, its error unwritten',
  (adapter) => {
    let fixture: PoolApp;

    beforeAll(async () => {
      fixture = await startPoolApp(`adv37a_gone_before_${adapter}`, {
        module: PaymentsModule,
        max: 4,
        adapter,
        usePool: (started) => (pool = started),
        setup: async (admin) => {
          await admin.query('CREATE TABLE payments (id serial PRIMARY KEY, ref text NOT NULL)');
        },
      });
      await fixture.app.listen(0, '127.0.0.1');
    }, 60_000);

    afterAll(async () => {
      await fixture?.admin.query(
        `SELECT pg_terminate_backend(pid) FROM pg_stat_activity
          WHERE datname = current_database() AND pid <> pg_backend_pid()`,
      );
      await Promise.race([fixture?.close(), sleep(2000)]);
      await fixture?.database.drop();
    });

    const check = async (ref: string, leaveAfterMs: number) => {
      calls = 0;
      declines = 1;
      const port = (fixture.app.getHttpServer().address() as AddressInfo).port;
      await postAndLeave(port, ref, leaveAfterMs);
      // The handler fails at ~350 ms; one lease (1 s) later the key is given back.
      await sleep(1900);
      const openTransactions = Number(
        (
          await fixture.admin.query<{ n: string }>(
            `SELECT count(*) AS n FROM pg_stat_activity
              WHERE datname = current_database() AND state LIKE 'idle in transaction%'`,
          )
        ).rows[0].n,
      );
      const held = (
        await fixture.admin.query(
          `SELECT 1 FROM idempotency_keys
            WHERE key = $1 AND state = 'started' AND locked_until > now()`,
          [ref],
        )
      ).rows.length;
      const again = await request(fixture.app.getHttpServer())
        .post('/payments')
        .set('Idempotency-Key', ref)
        .send({ ref })
        .timeout(5000);
      return { openTransactions, held, again: again.status, calls };
    };

    it('control: the client leaves while the handler runs (the guide row holds)', async () => {
      expect(await check(`during-${adapter}`, 250)).toEqual({
        openTransactions: 0,
        held: 0,
        again: 201,
        calls: 2,
      });
    });

    it('the client leaves during the guard: the key is given back after one lease', async () => {
      expect(await check(`before-${adapter}`, 50)).toEqual({
        openTransactions: 0,
        held: 0,
        again: 201,
        calls: 2,
      });
    });
  },
);
