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
  ServiceUnavailableException,
  UseInterceptors,
} from '@nestjs/common';
import { type Observable, of, retry, throwError, timer } from 'rxjs';
import { type Pool } from 'pg';
import request from 'supertest';
import { type AdapterName } from '../../support/bootstrap.js';
import { IdempotencyModule, Idempotent } from '../../../lib/index.js';
import { type PoolApp, startPoolApp } from '../../support/pool-app.js';

/**
 * Adversary, round 39a: the documented "answer 202 at once, run the handler in the background"
 * idiom (docs/guides/transactions.md:198), with the background subscription doing what such
 * subscriptions are for: it retries a passing outage (rxjs `retry()`) and hands the result on
 * (a webhook, a job-done event). Under `@Idempotent()` that subscription is never told anything:
 * no value, no error, no completion. The webhook is never sent (a lost effect), and the app's
 * retry never fires: the accepted job is rolled back with its passing 503 and never done (the
 * key given back; the client, told 202, has no reason to send it again).
 *
 * The app: `@UseInterceptors(AcceptInterceptor)` on the controller:
 * `next.handle().pipe(retry({ count: 1, delay: (e) => is503(e) ? timer(50) : throwError(() => e) }))
 *   .subscribe({ next: (job) => webhook.send(job), error: (e) => log(e) });
 *  return of({ accepted: true });`
 * `POST /jobs` (`@Idempotent()`, `@HttpCode(202)`) inserts a job row and returns it; in the
 * "outage" case its first call fails 503 (a passing outage of a service it calls) and the
 * second succeeds.
 *
 * What happens: the 202 is written before the background run is subscribed or while it claims,
 * so lib/http/run-owned.ts:355-358 (or `answeredOutside`, :443-475, via the hold) marks the run
 * `detached`. From then on the run's own subscriber is cut off: `next` drops the value
 * (run-owned.ts:369, `if (!detached) subscriber.next(value)`), `complete` only settles the
 * detached work (:430-434, no `subscriber.complete()`), and `error` (:372-376) settles it
 * through `settleDetachedWith` (lib/http/settle-detached.ts:39-43: a failure is rolled back,
 * the key given back) and returns without `subscriber.error(...)`. "Detached" was
 * written for an outer timeout, whose subscriber has unsubscribed; here the subscriber is the
 * app's own background subscription, still listening. So the webhook never fires, `retry()`
 * never sees the 503 (the handler is not run again; the job row rolled back, the key left
 * `started` and free), and the background subscription stays open for ever (its finalizers,
 * its error logging never run). Seen, Express and Fastify: no outage: row committed, key
 * `done 202`, delivered [], completed 0; outage: calls 1, rows 0, key `started`, delivered [].
 *
 * Expected: as on the same route without `@Idempotent()`: the background subscriber gets the
 * handler's value (webhook sent once), or its error (then its retry runs the handler again in a
 * fresh claim, as for any app retry, and the key's answer is the retry's); the job row once.
 *
 * Control: the same interceptor on the same handler without `@Idempotent()` (`/plain-jobs`):
 * the webhook is sent, the retry runs, one row (passes today).
 *
 * Severity: high (a lost effect: the webhook of work done is never sent; and with the retry,
 * work the client was told was accepted is never done).
 */
let pool: Pool;
let outages = 0;
let calls = 0;
const delivered: unknown[] = [];
const failed: unknown[] = [];
let completed = 0;
const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));
const is503 = (error: unknown) => (error as { getStatus?: () => number })?.getStatus?.() === 503;

/** Accepts the request at once, does its work in the background, then sends a webhook. */
@Injectable()
class AcceptInterceptor implements NestInterceptor {
  intercept(_context: ExecutionContext, next: CallHandler): Observable<unknown> {
    next
      .handle()
      .pipe(
        retry({
          count: 1,
          delay: (error: unknown) => (is503(error) ? timer(50) : throwError(() => error)),
        }),
      )
      .subscribe({
        next: (job) => delivered.push(job),
        error: (error: unknown) => failed.push(error),
        complete: () => (completed += 1),
      });
    return of({ accepted: true });
  }
}

const runJob = async (ref: string) => {
  calls += 1;
  await pool.query('INSERT INTO jobs (ref) VALUES ($1)', [ref]);
  if (outages > 0) {
    outages -= 1;
    throw new ServiceUnavailableException('mailer unavailable');
  }
  return { ref, done: true };
};

@Controller()
@UseInterceptors(AcceptInterceptor)
class JobsController {
  @Post('jobs')
  @HttpCode(202)
  @Idempotent()
  keyed(@Body() body: { ref: string }) {
    return runJob(body.ref);
  }

  @Post('plain-jobs')
  @HttpCode(202)
  plain(@Body() body: { ref: string }) {
    return runJob(body.ref);
  }
}

@Module({
  imports: [IdempotencyModule.forRootAsync({ useFactory: () => ({ globalKeys: true, pool }) })],
  controllers: [JobsController],
})
class JobsModule {}

describe.each<AdapterName>(['express', 'fastify'])(
  'adversary 39a (%s): the background run of a 202 route is never told its outcome',
  (adapter) => {
    let fixture: PoolApp;

    beforeAll(async () => {
      fixture = await startPoolApp(`adv39a_background_${adapter}`, {
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
      await fixture?.admin.query(
        `SELECT pg_terminate_backend(pid) FROM pg_stat_activity
          WHERE datname = current_database() AND pid <> pg_backend_pid()`,
      );
      await fixture?.close();
    });

    const check = async (path: string, ref: string, outage: boolean) => {
      outages = outage ? 1 : 0;
      calls = 0;
      delivered.length = 0;
      failed.length = 0;
      completed = 0;
      const first = await request(fixture.app.getHttpServer())
        .post(path)
        .set('Idempotency-Key', ref)
        .send({ ref })
        .timeout(5000);
      await sleep(600);
      const rows = Number(
        (
          await fixture.admin.query<{ n: string }>(
            'SELECT count(*) AS n FROM jobs WHERE ref = $1',
            [ref],
          )
        ).rows[0].n,
      );
      const key = await fixture.admin.query<{ state: string; response_code: number | null }>(
        'SELECT state, response_code FROM idempotency_keys WHERE key = $1',
        [ref],
      );
      return {
        first: first.status,
        stored: key.rows.map((row) => `${row.state} ${String(row.response_code)}`),
        calls,
        rows,
        delivered: [...delivered],
        failed: failed.length,
        completed,
      };
    };

    it.each([false, true])('control: without @Idempotent() (outage first: %s)', async (outage) => {
      const ref = `plain-${String(outage)}-${adapter}`;
      expect(await check('/plain-jobs', ref, outage)).toEqual({
        first: 202,
        stored: [],
        calls: outage ? 2 : 1,
        rows: outage ? 2 : 1,
        delivered: [{ ref, done: true }],
        failed: 0,
        completed: 1,
      });
    });

    it.each([false, true])(
      '@Idempotent(): the background subscriber is told (outage first: %s)',
      async (outage) => {
        const ref = `keyed-${String(outage)}-${adapter}`;
        expect(await check('/jobs', ref, outage)).toEqual({
          first: 202,
          // The handler's own answer, committed with its effects (the guide's row 198).
          stored: ['done 202'],
          calls: outage ? 2 : 1,
          // The failed try rolled back under the library.
          rows: 1,
          delivered: [{ ref, done: true }],
          failed: 0,
          completed: 1,
        });
      },
    );
  },
);
