import {
  Body,
  type CallHandler,
  Controller,
  type ExecutionContext,
  Injectable,
  Logger,
  Module,
  type NestInterceptor,
  type PipeTransform,
  Post,
} from '@nestjs/common';
import { APP_INTERCEPTOR } from '@nestjs/core';
import { EMPTY, type Observable, timeout } from 'rxjs';
import { type Pool } from 'pg';
import request from 'supertest';
import { type AdapterName } from '../../support/bootstrap.js';
import { IdempotencyModule, Idempotent } from '../../../lib/index.js';
import { type PoolApp, startPoolApp } from '../../support/pool-app.js';

/**
 * Adversary, round 32: the same app as adversary32-two-watchers-claim-again-409 (a metrics
 * interceptor and an audit one that each watch the result on the side, the audit giving up
 * after 100 ms, and a pipe slow the first time it sees a payment), on a `oneCommit` route:
 * the library's own 409 is stored as the key's final answer, with the payment committed.
 *
 * What happens: as there, run 0 gives its key back before its handler started
 * (lib/http/run-owned.ts:407-412) and runs 1 (metrics' side) and 3 (the client's) are both
 * told `claimAgain` at once (lib/idempotency.interceptor.ts:236-238). Run 1 claims in its own
 * uncommitted transaction (`claimWithWork`) and runs the handler, whose value goes to the
 * metrics side only; it then holds the key, its transaction open, until the adapter writes an
 * answer for it to commit. Run 3's claim waits on run 1's uncommitted row for `claimWaitMs`
 * (1 s, lib/http/claim-with-work.ts:14-16, :58) and is refused `key_in_progress`; the
 * adapter writes that 409 on the response the runs share. Run 1's hold takes it as its
 * handler's answer (run-owned.ts:122-191: its handler settled with a value, so it is neither
 * "answered outside" nor, being a 409, the library's passing error, :159-163) and commits it:
 * the payment and a stored 409 `key_in_progress` in one commit. Every retry of the key
 * replays that 409 for the key's life: the client never learns its payment was made.
 *
 * Expected: 201 with the payment, one row, the retry replaying 201 (a 409 of the library is
 * never a stored answer).
 *
 * Control: the same app with a quick pipe (answered before the audit gives up): 201, one
 * row, replayed.
 *
 * Severity: high (a wrong answer stored for ever over committed effects: the library's 409
 * "in progress" replayed for a payment that was made).
 */
let pool: Pool;
let slowMs = 400;
const seen = new Set<string>();

@Injectable()
class LookupPipe implements PipeTransform {
  async transform(value: { ref: string }) {
    if (!seen.has(value.ref)) {
      seen.add(value.ref);
      await new Promise((resolve) => setTimeout(resolve, slowMs));
    }
    return value;
  }
}

@Injectable()
class MetricsInterceptor implements NestInterceptor {
  private readonly logger = new Logger('metrics');
  intercept(_context: ExecutionContext, next: CallHandler): Observable<unknown> {
    const result$ = next.handle();
    result$.subscribe({
      next: () => this.logger.debug('answered'),
      error: (error: unknown) => this.logger.debug(`failed ${String(error)}`),
    });
    return result$;
  }
}

@Injectable()
class SlowWatchInterceptor implements NestInterceptor {
  private readonly logger = new Logger('audit');
  intercept(_context: ExecutionContext, next: CallHandler): Observable<unknown> {
    const result$ = next.handle();
    result$
      .pipe(
        timeout({
          first: 100,
          with: () => {
            this.logger.warn('slow request, not audited');
            return EMPTY;
          },
        }),
      )
      .subscribe({
        next: (value) => this.logger.debug(`answered ${JSON.stringify(value)}`),
        error: (error: unknown) => this.logger.debug(`failed ${String(error)}`),
      });
    return result$;
  }
}

@Controller()
class PaymentsController {
  @Post('payments')
  @Idempotent({ oneCommit: true })
  async pay(@Body(LookupPipe) body: { ref: string }) {
    await pool.query('INSERT INTO payments (ref) VALUES ($1)', [body.ref]);
    return { ref: body.ref, status: 'captured' };
  }
}

@Module({
  imports: [IdempotencyModule.forRootAsync({ useFactory: () => ({ globalKeys: true, pool }) })],
  controllers: [PaymentsController],
  providers: [
    { provide: APP_INTERCEPTOR, useClass: MetricsInterceptor },
    { provide: APP_INTERCEPTOR, useClass: SlowWatchInterceptor },
  ],
})
class PaymentsModule {}

describe.each<AdapterName>(['express', 'fastify'])(
  "adversary 32 (%s): oneCommit: the library's 409 stored over the payment",
  (adapter) => {
    let fixture: PoolApp;

    beforeAll(async () => {
      fixture = await startPoolApp(`adv32_one_commit_409_${adapter}`, {
        module: PaymentsModule,
        max: 4,
        adapter,
        usePool: (started) => (pool = started),
        setup: async (admin) => {
          await admin.query('CREATE TABLE payments (id serial PRIMARY KEY, ref text NOT NULL)');
        },
      });
    }, 60_000);

    afterAll(() => fixture?.close());

    const pay = (ref: string) =>
      request(fixture.app.getHttpServer())
        .post('/payments')
        .set('Idempotency-Key', ref)
        .send({ ref })
        .timeout(5_000);
    const rows = async (ref: string) =>
      Number(
        (await fixture.admin.query('SELECT count(*) FROM payments WHERE ref = $1', [ref])).rows[0]
          .count,
      );

    it.each([
      ['control: a quick pipe (answered before the audit gives up)', 0],
      ['a slow pipe: the audit gives up before the handler started', 400],
    ] as const)(
      '%s: 201, one payment, replayed',
      async (name, ms) => {
        slowMs = ms;
        const ref = `adv32-oc-${adapter}-${ms}`;
        const first = await pay(ref);
        await new Promise((resolve) => setTimeout(resolve, 2_000));
        const retry = await pay(ref);
        const stored = await fixture.admin.query(
          'SELECT state, response_code FROM idempotency_keys WHERE key = $1',
          [ref],
        );
        if (process.env.ADV_DEBUG) {
          console.log(name, first.status, retry.status, await rows(ref), stored.rows);
        }
        // Received with the slow pipe: first 409 key_in_progress; one row; stored done with 409;
        // the retry replays 409.
        expect(stored.rows).toEqual([{ state: 'done', response_code: 201 }]);
        expect({ status: first.status, body: first.body as unknown }).toEqual({
          status: 201,
          body: { ref, status: 'captured' },
        });
        expect(await rows(ref)).toBe(1);
        expect({ status: retry.status, replayed: retry.headers['idempotent-replayed'] }).toEqual({
          status: 201,
          replayed: 'true',
        });
      },
      20_000,
    );
  },
);
