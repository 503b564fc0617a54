import {
  Body,
  type CallHandler,
  Controller,
  type ExecutionContext,
  HttpCode,
  Injectable,
  Module,
  type NestInterceptor,
  Post,
  UseInterceptors,
} from '@nestjs/common';
import { type Observable, of } from 'rxjs';
import { type Pool } from 'pg';
import request from 'supertest';
import { type AdapterName } from '../../support/bootstrap.js';
import { IdempotencyModule, Idempotent } from '../../../lib/index.js';
import { type PoolApp, startPoolApp } from '../../support/pool-app.js';

/**
 * Adversary, round 37a: an "accept, then work in the background" interceptor (answers 202 at
 * once and subscribes to `next.handle()` on the side, its only subscription) around an
 * `@Idempotent()` route: the handler runs, but its work never commits: the library's run holds
 * a response that was answered before its hold was set, waits for ever for a write that will
 * not come, and keeps its transaction open and its key renewed: the job is never done; each
 * retry of the client's is accepted (202) and its background run meets 409, for the process's
 * life.
 *
 * The app: `POST /jobs` (`@Idempotent()`, `@HttpCode(202)`) inserts a job row; an interceptor
 * outside it (`@UseInterceptors(AcceptInterceptor)` on the controller) subscribes to
 * `next.handle()` for the work and returns `of({ accepted: true })`: Nest writes the 202 at
 * once. Without `@Idempotent()` the row commits a moment later (the control).
 *
 * What happens: the side subscription is the request's only run (lib/idempotency.interceptor.ts:
 * 227, no earlier run: `claimAndRun`, with no `writableEnded` guard, unlike `claimAfter`
 * at :244); the 202 is written while the claim is in flight, before any hold. The claim lands,
 * `runOwned` holds the raw response (lib/http/run-owned.ts:131, lib/http/response-hold.ts:99),
 * whose `end` already ran: the handler inserts the row in the request's transaction and
 * completes with its value to the side subscriber: nothing ever writes, the hold's finalizer
 * (the only commit) never runs. `settle(emitted)` keeps the heartbeat renewing "until written"
 * (run-owned.ts:332-335, :403): the key stays `started` and the transaction idle in
 * transaction, holding the row's locks and a pooled connection. The retry's background run
 * meets 409 `key_in_progress`, for ever: the job is never done.
 *
 * Expected: the job is done once: either its effects commit with the handler's own answer
 * (as under an outer timeout, docs/guides/transactions.md's row: "the handler goes on ... its
 * effects commit with its own answer"), the retry replaying it; or nothing runs and the key is
 * given back, the retry running it. Never work held uncommitted and a key held for ever.
 * (Arguably an odd use: the handler's answer is nobody's. But the guide's promise is the work
 * done once, and the library's own guard for "nobody would get its answer" (round 35a) covers
 * later runs only.)
 *
 * Control: the same app without `@Idempotent()`: the row commits, nothing is left open.
 *
 * (afterAll kills the held run's connection: jest reports it as an unhandled pg error, "Test
 * suite failed to run", a symptom of the break, gone with it.)
 *
 * Severity: high (work the client was told was accepted never done; a transaction left open
 * with its locks and a pooled connection per request; the key refused 409 for ever).
 */
let pool: Pool;
const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

/** Accepts the request at once and does its work in the background. */
@Injectable()
class AcceptInterceptor implements NestInterceptor {
  intercept(_context: ExecutionContext, next: CallHandler): Observable<unknown> {
    next.handle().subscribe({ error: () => undefined });
    return of({ accepted: true });
  }
}

const insertJob = async (ref: string) => {
  await pool.query('INSERT INTO jobs (ref) VALUES ($1)', [ref]);
  return { ref, done: true };
};

@Controller()
@UseInterceptors(AcceptInterceptor)
class JobsController {
  @Post('jobs')
  @HttpCode(202)
  @Idempotent()
  keyed(@Body() body: { ref: string }) {
    return insertJob(body.ref);
  }

  @Post('plain-jobs')
  @HttpCode(202)
  plain(@Body() body: { ref: string }) {
    return insertJob(body.ref);
  }
}

@Module({
  imports: [IdempotencyModule.forRootAsync({ useFactory: () => ({ globalKeys: true, pool }) })],
  controllers: [JobsController],
})
class JobsModule {}

describe.each<AdapterName>(['express', 'fastify'])(
  'adversary 37a (%s): a background run of a keyed route answered 202 at once',
  (adapter) => {
    let fixture: PoolApp;

    beforeAll(async () => {
      fixture = await startPoolApp(`adv37a_background_${adapter}`, {
        module: JobsModule,
        max: 4,
        adapter,
        usePool: (started) => (pool = started),
        setup: async (admin) => {
          await admin.query('CREATE TABLE jobs (id serial PRIMARY KEY, ref text NOT NULL)');
        },
      });
    }, 60_000);

    afterAll(async () => {
      // The break's run holds its transaction (and app.close() would wait on it): bounded.
      await fixture?.admin.query(
        `SELECT pg_terminate_backend(pid) FROM pg_stat_activity
          WHERE datname = current_database() AND pid <> pg_backend_pid()`,
      );
      await Promise.race([fixture?.close(), sleep(2000)]);
      await fixture?.database.drop();
    });

    const check = async (path: string, ref: string) => {
      const post = () =>
        request(fixture.app.getHttpServer())
          .post(path)
          .set('Idempotency-Key', ref)
          .send({ ref })
          .timeout(5000);
      const first = await post();
      await sleep(500);
      const rows = Number(
        (
          await fixture.admin.query<{ n: string }>(
            'SELECT count(*) AS n FROM jobs WHERE ref = $1',
            [ref],
          )
        ).rows[0].n,
      );
      const openTransactions = Number(
        (
          await fixture.admin.query<{ n: string }>(
            `SELECT count(*) AS n FROM pg_stat_activity
              WHERE datname = current_database() AND state LIKE 'idle in transaction%'`,
          )
        ).rows[0].n,
      );
      // The key still `started`, its lease renewed: the heartbeat of a run that never ends.
      await sleep(500);
      const held = (
        await fixture.admin.query(
          `SELECT 1 FROM idempotency_keys
            WHERE key = $1 AND state = 'started' AND locked_until > now()`,
          [ref],
        )
      ).rows.length;
      return { first: first.status, rows, openTransactions, held };
    };

    it('control: without @Idempotent() the background work commits', async () => {
      expect(await check('/plain-jobs', `plain-${adapter}`)).toEqual({
        first: 202,
        rows: 1,
        openTransactions: 0,
        held: 0,
      });
    });

    it('with @Idempotent(): the work commits once, nothing is held', async () => {
      expect(await check('/jobs', `keyed-${adapter}`)).toEqual({
        first: 202,
        rows: 1,
        openTransactions: 0,
        held: 0,
      });
    });
  },
);
