import { request as httpRequest } from 'node:http';
import { type AddressInfo } from 'node:net';
import {
  type ArgumentsHost,
  Body,
  type CallHandler,
  Catch,
  Controller,
  type ExceptionFilter,
  type ExecutionContext,
  HttpException,
  Injectable,
  Logger,
  Module,
  type NestInterceptor,
  Post,
} from '@nestjs/common';
import { APP_FILTER, APP_INTERCEPTOR, HttpAdapterHost } from '@nestjs/core';
import { type Observable } from 'rxjs';
import { type Pool } from 'pg';
import request from 'supertest';
import { type AdapterName } from '../../support/bootstrap.js';
import { IdempotencyModule, Idempotent } from '../../../lib/index.js';
import { type PoolApp, startPoolApp } from '../../support/pool-app.js';

/**
 * Adversary, round 37a: a client that left before its handler's error (the "499" path of
 * docs/guides/transactions.md) while the app audits "on the side": the audit's late run takes
 * the failed run's key as if it were the app's `retry()`, runs the handler again for nobody,
 * and, nothing ever to be written on a response whose client is gone, holds its transaction
 * open (idle in transaction, its rows and locks held) and its key renewed by the heartbeat
 * for the process's life: every retry of the client's gets 409.
 *
 * The app: a global audit interceptor that subscribes to `next.handle()` once its audit entry
 * is opened (round 33's idiom, 400 ms here: an audit store that is slow); a global `@Catch()`
 * filter in the "499" idiom (writes nothing to a client that is gone), as the guide's row
 * names it. `POST /payments` (`@Idempotent()`, `leaseMs: 1000`) inserts a row, asks the
 * provider (200 ms); the provider declines the first attempt (402, final) and would approve a
 * second. The client gives up after 80 ms (a mobile client's timeout) and retries later with
 * the same key.
 *
 * What happens: run 1's handler throws the 402 at ~200 ms; the client is gone, the filter
 * writes nothing. run-owned.ts:246-268 rolls its effects back and keeps the key one lease for
 * the filter. At 400 ms the audit subscribes: run 2 meets run 1 (interceptor.ts:250-277); its
 * `stepAside` (run-owned.ts:278-290: settled, failed, nothing written) gives the key back, and
 * run 2 `claimAfter`s (interceptor.ts:240-248): the response is not `writableEnded` (nothing
 * was, nothing will be: round 35a's guard misses a client that is gone), so it claims the key and
 * runs the handler again: the provider approves, the charge is made, the row inserted, and its
 * value goes to the audit. No answer is ever written: run 2's hold never commits, its
 * transaction stays open and its heartbeat renews the key (settled with a value, `untilWritten`,
 * run-owned.ts:332-335); the client's `close` fired before run 2 listened for it
 * (run-owned.ts:270-274), so `leftMidStream` never gives it back. The client's retry after the
 * lease gets 409 (and every retry after it); the charge it never learns of is never committed
 * nor rolled back until the process ends, and `app.close()` waits on that run for ever
 * (afterAll bounds it; the held run's connection, killed there, is reported by jest as an
 * unhandled pg error: "Test suite failed to run", a symptom of the break, gone with it).
 *
 * Expected (the guide's row): the handler runs once, its effects rolled back, the key given
 * back after one lease, nothing held; the retry after it runs the handler: 201, one charge.
 *
 * Control: the same app, the client staying: the filter writes the 402 at once, round 35a's
 * guard holds (the audit's run runs nothing), the retry replays 402.
 *
 * Severity: critical (a charge made for a request nobody is told of; a transaction left idle
 * holding its rows and a pooled connection; the key refused 409 for the process's life).
 */
let pool: Pool;
let calls = 0;
let charges = 0;
let declines = 1;
const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

/** Audits on the side: opens its audit entry first (a slow call of its own), then watches. */
@Injectable()
class AuditInterceptor implements NestInterceptor {
  private readonly logger = new Logger('audit');
  intercept(_context: ExecutionContext, next: CallHandler): Observable<unknown> {
    const result$ = next.handle();
    void sleep(400).then(() =>
      result$.subscribe({
        next: (value) => this.logger.debug(`answered ${JSON.stringify(value)}`),
        error: (error: unknown) => this.logger.debug(`failed ${String(error)}`),
      }),
    );
    return result$;
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
  @Idempotent({ leaseMs: 1000 })
  async pay(@Body() body: { ref: string }) {
    calls += 1;
    const { rows } = await pool.query<{ id: number }>(
      'INSERT INTO payments (ref) VALUES ($1) RETURNING id',
      [body.ref],
    );
    await sleep(200); // the provider
    if (declines > 0) {
      declines -= 1;
      throw new HttpException({ code: 'card_declined' }, 402);
    }
    charges += 1;
    return { ref: body.ref, id: rows[0].id };
  }
}

@Module({
  imports: [IdempotencyModule.forRootAsync({ useFactory: () => ({ globalKeys: true, pool }) })],
  controllers: [PaymentsController],
  providers: [
    { provide: APP_INTERCEPTOR, useClass: AuditInterceptor },
    { provide: APP_FILTER, useClass: GoneClientFilter },
  ],
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
  "adversary 37a (%s): a late side audit after a gone client's error",
  (adapter) => {
    let fixture: PoolApp;

    beforeAll(async () => {
      fixture = await startPoolApp(`adv37a_gone_audit_${adapter}`, {
        module: PaymentsModule,
        max: 4,
        adapter,
        usePool: (started) => {
          pool = started;
          // The break's connection, killed at the end while checked out: its error is noise.
          started.on('connect', (client) => client.on('error', () => undefined));
        },
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
      // The break's run holds its hold (and app.close() waits on it): bounded, then dropped.
      await Promise.race([fixture?.close(), sleep(2000)]);
      await fixture?.database.drop();
    });

    const post = (ref: string) =>
      request(fixture.app.getHttpServer())
        .post('/payments')
        .set('Idempotency-Key', ref)
        .send({ ref })
        .timeout(5000);

    const held = async () => ({
      calls,
      charges,
      openTransactions: Number(
        (
          await fixture.admin.query<{ n: string }>(
            `SELECT count(*) AS n FROM pg_stat_activity
              WHERE datname = current_database() AND state LIKE 'idle in transaction%'`,
          )
        ).rows[0].n,
      ),
    });

    it('control: the client stays (the 402 is written before the audit subscribes)', async () => {
      const ref = `stays-${adapter}`;
      calls = 0;
      charges = 0;
      declines = 1;
      const first = await post(ref);
      await sleep(700);
      const during = await held();
      const again = await post(ref);
      expect({ first: first.status, during, again: again.status }).toEqual({
        first: 402,
        during: { calls: 1, charges: 0, openTransactions: 0 },
        again: 402,
      });
    });

    it('the client left: the audit does not run the handler again, the key is given back', async () => {
      const ref = `left-${adapter}`;
      calls = 0;
      charges = 0;
      declines = 1;
      const port = (fixture.app.getHttpServer().address() as AddressInfo).port;
      await postAndLeave(port, ref, 80);
      await sleep(620);
      const during = await held();
      // After the lease (1 s) the key is given back: the retry runs the handler.
      await sleep(1200);
      const again = await post(ref);
      await sleep(100);
      expect({ during, again: again.status, after: await held() }).toEqual({
        during: { calls: 1, charges: 0, openTransactions: 0 },
        again: 201,
        after: { calls: 2, charges: 1, openTransactions: 0 },
      });
    });
  },
);
