import {
  Body,
  type CallHandler,
  Controller,
  type ExecutionContext,
  Injectable,
  Logger,
  Module,
  type NestInterceptor,
  Post,
} from '@nestjs/common';
import { APP_INTERCEPTOR } from '@nestjs/core';
import { type Observable } from 'rxjs';
import { type Pool } from 'pg';
import request from 'supertest';
import { IdempotencyModule, Idempotent } from '../../../lib/index.js';
import { type PoolApp, startPoolApp } from '../../support/pool-app.js';

/**
 * Adversary, round 33: a side watcher that subscribes while the request's answer commits (a
 * commit that takes a moment: a deferred check), on Express.
 *
 * The app: one global interceptor outside `@Idempotent()`, an audit on the side that opens its
 * entry first: `const r$ = next.handle(); audit.open().then(() => r$.subscribe(record));
 * return r$;` (150 ms). The handler inserts a payment; a deferred constraint trigger on the
 * table takes 400 ms at commit.
 *
 * Run 1 (the returned one) owns the key; its answer is written at once and held while its
 * transaction commits (lib/http/run-owned.ts:140, `answerWriting`). At 150 ms the audit
 * subscribes: run 2 meets run 1, which neither steps aside (writing) nor shares its outcome
 * (settled: run-owned.ts:291), so run 2 claims the key (lib/idempotency.interceptor.ts:241)
 * and meets run 1's claim: the library's 409 `key_in_progress`, made by `this.fail`
 * (interceptor.ts:204, :265). Making it sets its headers on the response at once
 * (lib/http/to-http.ts:19-21): `Content-Type: application/problem+json` and `Retry-After: 1`,
 * on the response run 1's hold is about to send. The 409 itself goes only to the audit's
 * subscriber; but run 1's answer then goes out as a 201 with the JSON body, typed
 * `application/problem+json` and with `Retry-After: 1`, while the answer stored (read when the
 * adapter ended it) and replayed is `application/json`. The client's first answer is not the
 * answer its retries get; a client that reads the type (a problem) or honours Retry-After on
 * any answer takes a payment made for a failure.
 *
 * Expected: the 201 the adapter wrote, typed `application/json`, without Retry-After, the same
 * as the replay; one run.
 *
 * Control: the audit subscribes at once (joins run 1): the 201 as written, replayed the same.
 *
 * Severity: medium (the first answer's headers say "problem, retry later" on a success, and
 * differ from every replay). Related to adversary33-late-side-watcher-reruns (a run after the
 * owner settled), a separate path: a library error of a run that is not the request's answer
 * writes its headers on the response all runs share.
 */
let pool: Pool;
let auditOpenMs = 150;
let calls = 0;
const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

/** Audits on the side: opens its audit entry first (a call of its own), then watches. */
@Injectable()
class AuditInterceptor implements NestInterceptor {
  private readonly logger = new Logger('audit');
  intercept(_context: ExecutionContext, next: CallHandler): Observable<unknown> {
    const result$ = next.handle();
    void sleep(auditOpenMs).then(() =>
      result$.subscribe({
        next: (value) => this.logger.debug(`answered ${JSON.stringify(value)}`),
        error: (error: unknown) => this.logger.debug(`failed ${String(error)}`),
      }),
    );
    return result$;
  }
}

@Controller()
class PaymentsController {
  @Post('payments')
  @Idempotent()
  async pay(@Body() body: { ref: string }) {
    calls += 1;
    const { rows } = await pool.query<{ id: number }>(
      'INSERT INTO payments (ref) VALUES ($1) RETURNING id',
      [body.ref],
    );
    return { ref: body.ref, id: rows[0].id };
  }
}

@Module({
  imports: [IdempotencyModule.forRootAsync({ useFactory: () => ({ globalKeys: true, pool }) })],
  controllers: [PaymentsController],
  providers: [{ provide: APP_INTERCEPTOR, useClass: AuditInterceptor }],
})
class PaymentsModule {}

describe('adversary 33: a side watcher that subscribes while the answer commits', () => {
  let fixture: PoolApp;

  beforeAll(async () => {
    fixture = await startPoolApp('adv33_late_watcher_409', {
      module: PaymentsModule,
      max: 4,
      usePool: (started) => (pool = started),
      setup: async (admin) => {
        await admin.query(`
          CREATE TABLE payments (id serial PRIMARY KEY, ref text NOT NULL);
          -- A check the payment's commit runs (a ledger balance, say): 400 ms.
          CREATE FUNCTION check_ledger() RETURNS trigger LANGUAGE plpgsql AS
            $$ BEGIN PERFORM pg_sleep(0.4); RETURN NULL; END $$;
          CREATE CONSTRAINT TRIGGER ledger_balanced AFTER INSERT ON payments
            DEFERRABLE INITIALLY DEFERRED FOR EACH ROW EXECUTE FUNCTION check_ledger();`);
      },
    });
  }, 60_000);

  afterAll(() => fixture?.close());

  const check = async (ref: string) => {
    const post = () =>
      request(fixture.app.getHttpServer())
        .post('/payments')
        .set('Idempotency-Key', ref)
        .send({ ref })
        .timeout(5000);
    calls = 0;
    const first = await post();
    await sleep(600);
    const rows = (
      await fixture.admin.query<{ id: number }>('SELECT id FROM payments WHERE ref = $1', [ref])
    ).rows;
    const again = await post();
    const answer = (response: request.Response) => ({
      status: response.status,
      contentType: response.headers['content-type'] as unknown,
      retryAfter: response.headers['retry-after'] as unknown,
      body: response.body as unknown,
    });
    return { first: answer(first), calls, rows: rows.map((row) => row.id), again: answer(again) };
  };

  it('the audit subscribes while the answer commits: answered as replayed', async () => {
    auditOpenMs = 150;
    const seen = await check('late');
    const id = (seen.first.body as { id: number }).id;
    const answer = {
      status: 201,
      contentType: 'application/json; charset=utf-8',
      retryAfter: undefined,
      body: { ref: 'late', id },
    };
    expect(seen).toEqual({ first: answer, calls: 1, rows: [id], again: answer });
  });

  it('control: the audit subscribes at once', async () => {
    auditOpenMs = 0;
    const seen = await check('quick');
    const id = (seen.first.body as { id: number }).id;
    const answer = {
      status: 201,
      contentType: 'application/json; charset=utf-8',
      retryAfter: undefined,
      body: { ref: 'quick', id },
    };
    expect(seen).toEqual({ first: answer, calls: 1, rows: [id], again: answer });
  });
});
