import {
  Body,
  type CallHandler,
  Controller,
  type ExecutionContext,
  type INestApplication,
  Injectable,
  Module,
  type NestInterceptor,
  Post,
  ServiceUnavailableException,
} from '@nestjs/common';
import { APP_INTERCEPTOR } from '@nestjs/core';
import { subscribe, unsubscribe } from 'node:diagnostics_channel';
import { type Observable, retry } from 'rxjs';
import { type Pool } from 'pg';
import request from 'supertest';
import { IDEMPOTENCY_CHANNELS, IdempotencyModule, Idempotent } from '../../../lib/index.js';
import { type PoolApp, startPoolApp } from '../../support/pool-app.js';

/**
 * Adversary, round 26: the classic "retry on serialization failure" interceptor outside
 * `@Idempotent()` releases the key TWICE and publishes `released` twice for one give-back.
 *
 * What the app does (Express, pool): a global `APP_INTERCEPTOR`
 * `next.handle().pipe(retry({ count: 1, delay: 50 }))`. `POST /transfers` (`@Idempotent()`)
 * inserts a row; its first try meets a serialization failure (40001, here raised by the
 * statement itself), the second succeeds.
 *
 * What happens: the handler's 40001 is a passing failure: lib/transaction/handler-failure.ts
 * (onHandlerError, `failure.kind === 'retry'`) rolls back, releases the key and publishes
 * `released` (reason database_transient). The app's retry resubscribes; lib/idempotency.interceptor.ts
 * calls `earlierRunStepsAside(raw)`, and the step-aside registered by lib/http/run-owned.ts
 * (holdRun, lines 245-251) checks only `settled/detached/answerWriting/givingBack/gaveBack`: none
 * is set by onHandlerError's give-back, so it runs `rollBackAndRelease(..., 'retried')` again:
 * a second RELEASE statement (a round trip on the retry's path) and a second `released` event.
 *
 * What is expected: one give-back, one `released` event (as when the handler's error is final
 * and the step-aside alone gives the key back: the control).
 *
 * Severity: low (a duplicate event/metric and an extra statement; the RELEASE is fenced, so
 * no other owner's key is freed).
 */
let pool: Pool;
let failWith: 'serialization' | 'final' | undefined;

@Injectable()
class RetryInterceptor implements NestInterceptor {
  intercept(_context: ExecutionContext, next: CallHandler): Observable<unknown> {
    return next.handle().pipe(retry({ count: 1, delay: 50 }));
  }
}

@Controller()
class TransfersController {
  @Post('transfers')
  @Idempotent()
  async create(@Body() body: { ref: string }): Promise<{ ref: string }> {
    await pool.query('INSERT INTO transfers (ref) VALUES ($1)', [body.ref]);
    const failing = failWith;
    failWith = undefined;
    if (failing === 'serialization') {
      await pool.query(
        "DO $$ BEGIN RAISE EXCEPTION 'could not serialize access' USING ERRCODE = '40001'; END $$",
      );
    }
    if (failing === 'final') throw new ServiceUnavailableException('processor down');
    return { ref: body.ref };
  }
}

@Module({
  imports: [
    IdempotencyModule.forRootAsync({
      useFactory: () => ({ globalKeys: true, pool, leaseMs: 2_000 }),
    }),
  ],
  controllers: [TransfersController],
  providers: [{ provide: APP_INTERCEPTOR, useClass: RetryInterceptor }],
})
class TransfersModule {}

describe('adversary 26: a retry after a passing handler failure releases the key twice', () => {
  let fixture: PoolApp;
  let app: INestApplication;
  const released: { key: string; reason: string }[] = [];
  const onReleased = (event: unknown) => released.push(event as { key: string; reason: string });

  beforeAll(async () => {
    subscribe(IDEMPOTENCY_CHANNELS.released, onReleased);
    fixture = await startPoolApp('adv26_released_twice', {
      module: TransfersModule,
      max: 4,
      usePool: (started) => (pool = started),
      setup: async (admin) => {
        await admin.query('CREATE TABLE transfers (id serial PRIMARY KEY, ref text NOT NULL)');
      },
    });
    app = fixture.app;
  }, 60_000);

  afterAll(async () => {
    unsubscribe(IDEMPOTENCY_CHANNELS.released, onReleased);
    await fixture?.close();
  });

  const send = (key: string, ref: string) =>
    request(app.getHttpServer()).post('/transfers').set('Idempotency-Key', key).send({ ref });
  const count = async (ref: string) =>
    Number(
      (await fixture.admin.query('SELECT count(*) FROM transfers WHERE ref = $1', [ref])).rows[0]
        .count,
    );

  it.each([
    ['control: a final error, given back by the step-aside alone', 'final', 'adv26-final'],
    ['a serialization failure (40001)', 'serialization', 'adv26-serial'],
  ] as const)(
    '%s: one give-back, one released event',
    async (_name, failing, key) => {
      failWith = failing;
      const response = await send(key, key);
      await new Promise((resolve) => setTimeout(resolve, 300));
      expect(response.status).toBe(201);
      expect(await count(key)).toBe(1);
      const mine = released.filter((event) => event.key === key);
      if (process.env.ADV_DEBUG) console.log(key, mine);
      // Received for 40001: two events, reasons ['database_transient', 'retried'].
      expect(mine.map((event) => event.reason)).toHaveLength(1);
    },
    20_000,
  );
});
