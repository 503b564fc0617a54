import {
  type CallHandler,
  Controller,
  HttpException,
  Injectable,
  Module,
  type NestInterceptor,
  Param,
  Post,
  UseInterceptors,
} from '@nestjs/common';
import { retry } from 'rxjs';
import { type Pool } from 'pg';
import request from 'supertest';
import { IdempotencyModule, Idempotent } from '../lib/index.js';
import { type PoolApp, startPoolApp } from './support/pool-app.js';

/**
 * A retry interceptor written above `@Idempotent()` on a route runs inside the library's run:
 * both tries share the request's transaction, whose first try's writes cannot be undone apart
 * (round 39b found it on GraphQL fields: two ledger rows under one stored payment). The second
 * call of the handler after the first wrote is refused (500 handler_retried_inside, nothing
 * stored, the key given back); one that fails before it writes is retried as the app wants;
 * written below `@Idempotent()` (outside), each try has a transaction of its own.
 */

let pool: Pool;
let calls = 0;

/** The app's resilience interceptor: one more try after any error. */
@Injectable()
class RetryOnce implements NestInterceptor {
  intercept(_context: unknown, next: CallHandler) {
    return next.handle().pipe(retry(1));
  }
}

@Controller()
class LedgerController {
  /** Writes its ledger row, then fails the first time (a provider's 502 blip). */
  private async pay(ref: string, writeFirst: boolean) {
    calls += 1;
    if (writeFirst) await pool.query('INSERT INTO ledger (ref) VALUES ($1)', [ref]);
    if (calls === 1) throw new HttpException('provider blip', 502);
    if (!writeFirst) await pool.query('INSERT INTO ledger (ref) VALUES ($1)', [ref]);
    return { ref };
  }

  @Post('inside/:ref')
  @UseInterceptors(RetryOnce)
  @Idempotent()
  inside(@Param('ref') ref: string) {
    return this.pay(ref, true);
  }

  @Post('inside-before-write/:ref')
  @UseInterceptors(RetryOnce)
  @Idempotent()
  insideBeforeWrite(@Param('ref') ref: string) {
    return this.pay(ref, false);
  }

  @Post('outside/:ref')
  @Idempotent()
  @UseInterceptors(RetryOnce)
  outside(@Param('ref') ref: string) {
    return this.pay(ref, true);
  }
}

@Module({
  imports: [IdempotencyModule.forRootAsync({ useFactory: () => ({ globalKeys: true, pool }) })],
  controllers: [LedgerController],
  providers: [RetryOnce],
})
class LedgerModule {}

describe('a retry interceptor inside @Idempotent() on a route', () => {
  let fixture: PoolApp;
  beforeAll(async () => {
    fixture = await startPoolApp('retry_inside', {
      module: LedgerModule,
      max: 4,
      usePool: (started) => (pool = started),
      setup: async (admin) => {
        await admin.query('CREATE TABLE ledger (ref text NOT NULL)');
      },
    });
  }, 60_000);
  afterAll(async () => fixture?.close());
  beforeEach(() => {
    calls = 0;
  });

  const post = (path: string) =>
    request(fixture.app.getHttpServer()).post(path).set('Idempotency-Key', path);
  const rows = async (ref: string) =>
    (await fixture.admin.query('SELECT count(*)::int AS n FROM ledger WHERE ref = $1', [ref]))
      .rows[0].n as number;

  it('written outside (below it): the failed try rolled back, one row, 201 replayed', async () => {
    const first = await post('/outside/a');
    expect([first.status, calls, await rows('a')]).toEqual([201, 2, 1]);
    expect((await post('/outside/a')).status).toBe(201);
  });

  it('written inside (above it), the handler wrote before failing: refused, nothing kept', async () => {
    const first = await post('/inside/b');
    expect(first.status).toBe(500);
    expect(first.body.code).toBe('handler_retried_inside');
    expect(first.body.detail).toContain('Write @Idempotent() above your retry interceptor');
    expect([calls, await rows('b')]).toEqual([1, 0]);
    // Not stored: the key was given back, and the retry meets the same refusal.
    calls = 0;
    const again = await post('/inside/b');
    expect([again.status, again.body.code, await rows('b')]).toEqual([
      500,
      'handler_retried_inside',
      0,
    ]);
  });

  it('written inside, the first try failed before it wrote: the retry runs, one row', async () => {
    const first = await post('/inside-before-write/c');
    expect([first.status, calls, await rows('c')]).toEqual([201, 2, 1]);
  });
});
