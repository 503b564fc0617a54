import {
  BadGatewayException,
  type CallHandler,
  Controller,
  type ExecutionContext,
  Injectable,
  Module,
  type NestInterceptor,
  Param,
  Post,
  UseInterceptors,
} from '@nestjs/common';
import { type Pool } from 'pg';
import { defer, map, type Observable, retry, throwError, timer } from 'rxjs';
import request from 'supertest';
import { IdempotencyModule, Idempotent } from '../../../lib/index.js';
import { ADAPTERS } from '../../support/bootstrap.js';
import { type PoolApp, startPoolApp } from '../../support/pool-app.js';

/**
 * Adversary 40a: round 39b refuses a second call of the handler inside one run after the
 * first wrote (handler_retried_inside), but only for a handler that answers with a value or a
 * Promise. A handler that answers with an Observable (the @nestjs/axios idiom: write the
 * ledger row, then `return this.http.post(...)`, an Observable) is called again by the same
 * retry and is not refused: both tries' ledger rows commit with the second try's answer.
 *
 * App: Express and Fastify. `POST /payments/:ref`, with the app's resilience interceptor
 * `@UseInterceptors(RetryInterceptor)` written above `@Idempotent()` (inside it:
 * `next.handle().pipe(retry({ count: 1, delay: 20 }))`). The handler is `async`: it inserts
 * its ledger row, then returns the provider client's Observable (as HttpService.post does),
 * which fails with a 502 blip the first time.
 * What happens: the first call's Promise resolves to an Observable, so lib/idempotent.decorator.ts
 * noteObservableAnswer (:31-46) sets `handlerAnsweredWithObservable`; from then on every call of
 * the wrapped method is taken for a sibling (lib/own-handler-call.ts:24 `isOwnCall` is false
 * when `answeredWithObservable`), so the refusal at lib/idempotent.decorator.ts:73
 * (`own && handlerStarted && transaction.begun`) is skipped for the retry's second call of
 * the route's own handler. It inserts a second row in the same transaction, and the run
 * commits both with the answer `{ ref }`.
 * Expected (docs/guides/transactions.md:195, problems.md handler_retried_inside): after the
 * first try wrote, the second call is refused, 500 handler_retried_inside, nothing kept; or a
 * single effect. Never two ledger rows under one key.
 * Control: the same handler answering with a Promise (`await lastValueFrom(...)`): refused,
 * no row kept.
 * Severity: critical (a double effect committed with the key's answer).
 */
let pool: Pool;
const calls: Record<string, number> = {};

@Injectable()
class RetryInterceptor implements NestInterceptor {
  intercept(_context: ExecutionContext, next: CallHandler): Observable<unknown> {
    return next.handle().pipe(retry({ count: 1, delay: 20 }));
  }
}

/** The provider's client, shaped as @nestjs/axios HttpService: an Observable per call. */
function provider(ref: string): Observable<{ ref: string; charged: true }> {
  return defer(() =>
    calls[ref] === 1
      ? throwError(() => new BadGatewayException('provider blip'))
      : timer(5).pipe(map(() => ({ ref, charged: true as const }))),
  );
}

@Controller('payments')
class PaymentsController {
  /** Answers with the provider's Observable (the HttpService idiom). */
  @Post('observable/:ref')
  @UseInterceptors(RetryInterceptor)
  @Idempotent()
  async observable(@Param('ref') ref: string): Promise<Observable<unknown>> {
    calls[ref] = (calls[ref] ?? 0) + 1;
    await pool.query('INSERT INTO ledger (ref) VALUES ($1)', [ref]);
    return provider(ref);
  }

  /** The control: the same, awaiting the provider (a Promise answer). */
  @Post('promise/:ref')
  @UseInterceptors(RetryInterceptor)
  @Idempotent()
  async promise(@Param('ref') ref: string): Promise<unknown> {
    calls[ref] = (calls[ref] ?? 0) + 1;
    await pool.query('INSERT INTO ledger (ref) VALUES ($1)', [ref]);
    return await new Promise((resolve, reject) =>
      provider(ref).subscribe({ next: resolve, error: reject }),
    );
  }
}

describe.each(ADAPTERS)(
  'adversary 40a: an Observable handler retried inside @Idempotent(), on %s',
  (adapter) => {
    let fixture: PoolApp;

    beforeAll(async () => {
      @Module({
        imports: [
          IdempotencyModule.forRootAsync({ useFactory: () => ({ globalKeys: true, pool }) }),
        ],
        controllers: [PaymentsController],
      })
      class PaymentsModule {}
      fixture = await startPoolApp(`adv40a_obsretry_${adapter}`, {
        module: PaymentsModule,
        adapter,
        max: 4,
        usePool: (started) => (pool = started),
        setup: async (owner) => {
          await owner.query('CREATE TABLE ledger (id serial PRIMARY KEY, ref text NOT NULL)');
        },
      });
    }, 60_000);

    afterAll(async () => {
      await fixture?.close();
    });

    async function run(way: 'observable' | 'promise') {
      const ref = `${adapter}-${way}`;
      const answer = await request(fixture.app.getHttpServer())
        .post(`/payments/${way}/${ref}`)
        .set('Idempotency-Key', ref)
        .send({});
      const rows = await fixture.admin.query(
        'SELECT count(*)::int AS n FROM ledger WHERE ref = $1',
        [ref],
      );
      return {
        status: answer.status,
        code: (answer.body as { code?: string }).code,
        ran: calls[ref],
        kept: (rows.rows[0] as { n: number }).n,
      };
    }

    it('control: a Promise answer retried inside is refused after the first try wrote, nothing kept', async () => {
      const seen = await run('promise');
      expect({ status: seen.status, ran: seen.ran, kept: seen.kept }).toEqual({
        status: 500,
        ran: 1,
        kept: 0,
      });
    });

    it('an Observable answer retried inside: at most one ledger row per answered payment', async () => {
      const seen = await run('observable');
      // Refused (500, nothing kept) or one effect for the one payment answered; never two.
      expect({ status: seen.status, kept: seen.kept }).toEqual(
        seen.status === 500 ? { status: 500, kept: 0 } : { status: seen.status, kept: 1 },
      );
    });
  },
);
