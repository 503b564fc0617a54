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
import { concatMap, type Observable, take, timer, toArray } from 'rxjs';
import { type Pool } from 'pg';
import request from 'supertest';
import { type AdapterName } from '../../support/bootstrap.js';
import { IdempotencyModule, Idempotent } from '../../../lib/index.js';
import { type PoolApp, startPoolApp } from '../../support/pool-app.js';

/**
 * Adversary, round 33: an audit on the side beside an interceptor that collects a handler's
 * values: the client's run is given the handler's last value only, and its answer loses the
 * others.
 *
 * The app, two global interceptors outside `@Idempotent()`:
 *  - collect (outer): `next.handle().pipe(toArray())`: the answer is every value the handler
 *    emits (a batch's results, one per item);
 *  - audit: `const r$ = next.handle(); r$.subscribe(record); return r$;` (the audit "on the
 *    side", watching every value).
 * `POST /batches/:ref` (`@Idempotent()`) returns an Observable that imports three items one
 * after another (a row each) and emits each one's result.
 *
 * What happens: the audit's side subscription is run 1 and owns the key; the returned one,
 * the client's, is run 2 and joins it (lib/idempotency.interceptor.ts:240-245). A joined run
 * is given what the handler came to (lib/http/run-owned.ts:393): its last value, kept in
 * `result` (each value overwrites it), and emits that one value (interceptor.ts:248,
 * `of(came.value)`). `toArray()` then collects `[{ n: 2 }]`: the client is answered one result
 * of three, and it is stored so. The handler ran once and imported all three: the answer
 * names only the last; items 0 and 1 are in the database and in no answer, ever (retries
 * replay it). Without the audit the same app answers all three.
 *
 * Expected: the client's run sees every value the handler emitted (as the run that owns it
 * does): `[{ n: 0 }, { n: 1 }, { n: 2 }]`, three rows, replayed.
 *
 * Control: the same app without the side subscription: all three, three rows, replayed.
 *
 * Severity: medium (an audit beside the route changes the request's answer, and the
 * truncated answer is stored as the key's final answer; no work is lost).
 */
let pool: Pool;
let audited = true;

@Injectable()
class CollectInterceptor implements NestInterceptor {
  intercept(_context: ExecutionContext, next: CallHandler): Observable<unknown> {
    return next.handle().pipe(toArray());
  }
}

@Injectable()
class AuditInterceptor implements NestInterceptor {
  private readonly logger = new Logger('audit');
  intercept(_context: ExecutionContext, next: CallHandler): Observable<unknown> {
    const result$ = next.handle();
    if (audited) {
      result$.subscribe({
        next: (value) => this.logger.debug(`result ${JSON.stringify(value)}`),
        error: (error: unknown) => this.logger.debug(`failed ${String(error)}`),
      });
    }
    return result$;
  }
}

@Controller()
class BatchesController {
  @Post('batches/:ref')
  @Idempotent()
  importBatch(@Param('ref') ref: string): Observable<{ n: number }> {
    return timer(0, 30).pipe(
      take(3),
      concatMap(async (n) => {
        await pool.query('INSERT INTO items (ref, n) VALUES ($1, $2)', [ref, n]);
        return { n };
      }),
    );
  }
}

@Module({
  imports: [IdempotencyModule.forRootAsync({ useFactory: () => ({ globalKeys: true, pool }) })],
  controllers: [BatchesController],
  providers: [
    { provide: APP_INTERCEPTOR, useClass: CollectInterceptor },
    { provide: APP_INTERCEPTOR, useClass: AuditInterceptor },
  ],
})
class BatchesModule {}

describe.each<AdapterName>(['express', 'fastify'])(
  'adversary 33 (%s): a run joined to the one that owns the key, collecting its values',
  (adapter) => {
    let fixture: PoolApp;

    beforeAll(async () => {
      fixture = await startPoolApp(`adv33_joined_last_${adapter}`, {
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

    const whole = { status: 201, body: [{ n: 0 }, { n: 1 }, { n: 2 }] };

    it('audited on the side: the client is answered every value', async () => {
      audited = true;
      const seen = await check(`audited-${adapter}`);
      expect(seen).toEqual({ first: whole, items: [0, 1, 2], again: whole });
    });

    it('control: not audited', async () => {
      audited = false;
      const seen = await check(`plain-${adapter}`);
      expect(seen).toEqual({ first: whole, items: [0, 1, 2], again: whole });
    });
  },
);
