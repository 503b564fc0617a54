import {
  type CallHandler,
  Controller,
  type ExecutionContext,
  Injectable,
  Logger,
  Module,
  type NestInterceptor,
  Param,
  Post,
} from '@nestjs/common';
import { APP_INTERCEPTOR } from '@nestjs/core';
import { concatMap, type Observable, take, timer } from 'rxjs';
import { type Pool } from 'pg';
import request from 'supertest';
import { type AdapterName } from '../../support/bootstrap.js';
import { IdempotencyModule, Idempotent } from '../../../lib/index.js';
import { type PoolApp, startPoolApp } from '../../support/pool-app.js';

/**
 * Adversary, round 33: an audit on the side that records only the first value (`take(1)`) of
 * a handler that goes on: the library cuts the handler's work short for the client's run too.
 *
 * The app: a global interceptor outside `@Idempotent()`, `const r$ = next.handle();
 * r$.pipe(take(1)).subscribe(record); return r$;` (the brief's "audit on the side", watching
 * the first answer only). `POST /batches/:ref` (`@Idempotent()`) returns an Observable that
 * imports three items one after another (a row each) and emits its progress after each;
 * Nest answers its last value, `{ imported: 3 }`.
 *
 * What happens: the side subscription is run 1 and owns the key; the returned one (the
 * client's) is run 2 and joins it (lib/idempotency.interceptor.ts:238-248), waiting for what
 * the handler comes to. After the first item the side's `take(1)` unsubscribes run 1:
 * lib/http/run-owned.ts:405-411 takes that as "the request's answer is this first value"
 * (the `firstValueFrom` of the run that answers) and unsubscribes the handler (:409), then
 * gives run 2 that first value (:410, interceptor.ts:248). The import stops after one item;
 * the client is answered 201 `{ imported: 1 }`, committed with one row, and every retry
 * replays it: the two other items are never imported, and nothing says so. The same
 * unsubscription by the run that answers is right; by a watcher beside it, it is not: the
 * client's run still wanted the whole handler (without the library it would have it).
 *
 * Expected: the handler runs to its end for the client's run: `{ imported: 3 }`, three rows,
 * replayed. (request-runs.e2e-spec.ts's "takes the first value only" row inserts its one row
 * before its Observable and reads no body: it does not see this.)
 *
 * Control: the audit watches every value: `{ imported: 3 }`, three rows, replayed.
 *
 * Severity: high (a side watcher silently truncates the handler's work, and the truncated
 * answer is stored as the key's final answer).
 */
let pool: Pool;
let sideTakesOne = true;

@Injectable()
class AuditInterceptor implements NestInterceptor {
  private readonly logger = new Logger('audit');
  intercept(_context: ExecutionContext, next: CallHandler): Observable<unknown> {
    const result$ = next.handle();
    (sideTakesOne ? result$.pipe(take(1)) : result$).subscribe({
      next: (value) => this.logger.debug(`first answer ${JSON.stringify(value)}`),
      error: (error: unknown) => this.logger.debug(`failed ${String(error)}`),
    });
    return result$;
  }
}

@Controller()
class BatchesController {
  /** Imports three items, one after another, each its row; answers the last one's progress. */
  @Post('batches/:ref')
  @Idempotent()
  importBatch(@Param('ref') ref: string): Observable<{ ref: string; imported: number }> {
    return timer(0, 30).pipe(
      take(3),
      concatMap(async (n) => {
        await pool.query('INSERT INTO items (ref, n) VALUES ($1, $2)', [ref, n]);
        return { ref, imported: n + 1 };
      }),
    );
  }
}

@Module({
  imports: [IdempotencyModule.forRootAsync({ useFactory: () => ({ globalKeys: true, pool }) })],
  controllers: [BatchesController],
  providers: [{ provide: APP_INTERCEPTOR, useClass: AuditInterceptor }],
})
class BatchesModule {}

describe.each<AdapterName>(['express', 'fastify'])(
  'adversary 33 (%s): a side watcher that takes the first value of a handler that goes on',
  (adapter) => {
    let fixture: PoolApp;

    beforeAll(async () => {
      fixture = await startPoolApp(`adv33_side_take_one_${adapter}`, {
        module: BatchesModule,
        max: 4,
        adapter,
        usePool: (started) => (pool = started),
        setup: async (admin) => {
          await admin.query('CREATE TABLE items (ref text NOT NULL, n int NOT NULL)');
        },
      });
    }, 60_000);

    afterAll(() => fixture?.close());

    const check = async (ref: string) => {
      const post = () =>
        request(fixture.app.getHttpServer())
          .post(`/batches/${ref}`)
          .set('Idempotency-Key', ref)
          .timeout(5000);
      const first = await post();
      await new Promise((resolve) => setTimeout(resolve, 300));
      const items = (
        await fixture.admin.query<{ n: number }>('SELECT n FROM items WHERE ref = $1 ORDER BY n', [
          ref,
        ])
      ).rows.map((row) => row.n);
      const again = await post();
      return {
        first: { status: first.status, body: first.body as unknown },
        items,
        again: { status: again.status, body: again.body as unknown },
      };
    };

    it('the audit takes the first value: the client still gets the handler whole', async () => {
      sideTakesOne = true;
      const ref = `one-${adapter}`;
      const seen = await check(ref);
      const answer = { status: 201, body: { ref, imported: 3 } };
      expect(seen).toEqual({ first: answer, items: [0, 1, 2], again: answer });
    });

    it('control: the audit watches every value', async () => {
      sideTakesOne = false;
      const ref = `all-${adapter}`;
      const seen = await check(ref);
      const answer = { status: 201, body: { ref, imported: 3 } };
      expect(seen).toEqual({ first: answer, items: [0, 1, 2], again: answer });
    });
  },
);
