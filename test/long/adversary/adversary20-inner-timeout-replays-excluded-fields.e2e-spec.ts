import {
  Body,
  type CallHandler,
  ClassSerializerInterceptor,
  Controller,
  type ExecutionContext,
  type INestApplication,
  Injectable,
  Module,
  type NestInterceptor,
  Post,
  RequestTimeoutException,
  UseInterceptors,
} from '@nestjs/common';
import { APP_INTERCEPTOR } from '@nestjs/core';
import { Exclude } from 'class-transformer';
import { catchError, type Observable, throwError, timeout, TimeoutError } from 'rxjs';
import { type Pool } from 'pg';
import request from 'supertest';
import { IdempotencyModule, Idempotent } from '../../../lib/index.js';
import { type PoolApp, startPoolApp } from '../../support/pool-app.js';

/**
 * Adversary, round 20: an inner timeout while the handler's Promise goes on (9c837b6, its
 * Observable case f924d56): the late answer is rendered from the handler's raw value, past
 * the app's global `ClassSerializerInterceptor`, so the stored and replayed answer carries the
 * fields the entity marks `@Exclude()` (a password hash), which no answer of the route ever
 * carries otherwise.
 *
 * What the app does (Express, pool): Nest's serialization recipe, `ClassSerializerInterceptor`
 * registered globally (`APP_INTERCEPTOR`), a `UserEntity` whose `password` is `@Exclude()`d.
 * `POST /users` creates a user, then waits on an e-mail verification service (800 ms this
 * time, 10 ms normally), and returns `new UserEntity(...)`. Nest's documented timeout
 * interceptor (`timeout(400)`, `TimeoutError` to `RequestTimeoutException`) is written above
 * `@Idempotent()` (inside the library). The client gets the 408, waits, retries with its key.
 *
 * What happens: run-owned.ts:266-277 takes the handler's own Promise (`handlerOutcome`,
 * lib/http/handler-result.ts:180) and `settleDetached` (lib/http/settle-detached.ts:43-45)
 * renders its value with `renderResult` (`JSON.stringify` of the entity instance): the global
 * `ClassSerializerInterceptor`, outside `@Idempotent()`, never sees it. The retry replays
 * 201 `{"id":...,"email":...,"password":"$hash..."}` for ever.
 *
 * Fixed: a late value that is not plain data (a class instance, which the app's own layers
 * outside the library transform) is not stored: rolled back, its key given back, the retry runs
 * again and answers as the app serializes (`isPlainData`, lib/http/plain-data.ts).
 *
 * What should happen: transactions.md's failure table: "its effects commit with its own
 * answer ... (rendered as the adapter would)": the adapter is handed the value after the
 * app's global interceptors, so the answer is the serialized user, as the control (the same
 * route when the verification is fast) answers and replays: no `password`.
 *
 * Why it matters: the retry of a slow sign-up returns the password hash (or any `@Exclude()`d
 * secret: an API key, a card's data) that the app's serializer exists to strip, and keeps
 * returning it for the key's retention. The same rendering serves the outer-timeout row.
 * Severity: high (a data leak on a standard Nest setup), though it needs a timeout.
 */
let pool: Pool;
/** How long the next call's verification takes, when the test says (the service recovered). */
let retryVerifyMs: number | undefined;
const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

class UserEntity {
  id!: number;
  email!: string;

  @Exclude()
  password!: string;

  constructor(partial: Partial<UserEntity>) {
    Object.assign(this, partial);
  }
}

@Injectable()
class TimeoutInterceptor implements NestInterceptor {
  intercept(_context: ExecutionContext, next: CallHandler): Observable<unknown> {
    return next.handle().pipe(
      timeout(400),
      catchError((error: unknown) =>
        throwError(() => (error instanceof TimeoutError ? new RequestTimeoutException() : error)),
      ),
    );
  }
}

@Controller()
class UsersController {
  @Post('users')
  @UseInterceptors(TimeoutInterceptor)
  @Idempotent()
  async create(@Body() body: { email: string; verifyMs: number }): Promise<UserEntity> {
    const hash = `$argon2id$v=19$hash-of-${body.email}`;
    const { rows } = await pool.query<{ id: number }>(
      'INSERT INTO users (email, password) VALUES ($1, $2) RETURNING id',
      [body.email, hash],
    );
    // The e-mail verification service (as fast as the test says for a retry, once recovered).
    const verifyMs = retryVerifyMs ?? body.verifyMs;
    retryVerifyMs = undefined;
    await sleep(verifyMs);
    return new UserEntity({ id: rows[0].id, email: body.email, password: hash });
  }
}

@Module({
  imports: [IdempotencyModule.forRootAsync({ useFactory: () => ({ globalKeys: true, pool }) })],
  controllers: [UsersController],
  providers: [
    TimeoutInterceptor,
    { provide: APP_INTERCEPTOR, useClass: ClassSerializerInterceptor },
  ],
})
class UsersModule {}

describe('adversary 20: an inner timeout replays the fields ClassSerializerInterceptor strips', () => {
  let fixture: PoolApp;
  let app: INestApplication;

  beforeAll(async () => {
    fixture = await startPoolApp('adv20_inner_timeout_excluded', {
      module: UsersModule,
      max: 4,
      usePool: (started) => {
        pool = started;
      },
      setup: async (admin) => {
        await admin.query(
          'CREATE TABLE users (id serial PRIMARY KEY, email text UNIQUE NOT NULL, password text NOT NULL)',
        );
      },
    });
    app = fixture.app;
  }, 60_000);

  afterAll(async () => {
    await fixture?.close();
  });

  const send = (key: string, email: string, verifyMs: number) =>
    request(app.getHttpServer())
      .post('/users')
      .set('Idempotency-Key', key)
      .timeout(10_000)
      .send({ email, verifyMs });

  it.each([
    ['fast verification, no timeout: control', 10],
    ['slow verification, the inner timeout fires', 800],
  ])(
    '%s: the retry replays the user without its password',
    async (_name, verifyMs) => {
      const email = `user-${verifyMs}@example.com`;
      retryVerifyMs = undefined;
      const first = await send(`signup-${verifyMs}`, email, verifyMs);
      await sleep(1_200); // the handler has settled meanwhile
      // The verification service is fast again: whatever the first try left, the retry
      // answers (replays, or runs again) the user as the app serializes it.
      retryVerifyMs = 10;
      const retry = await send(`signup-${verifyMs}`, email, verifyMs);
      const users = await fixture.admin.query(
        'SELECT count(*)::int AS n FROM users WHERE email = $1',
        [email],
      );
      // Observed for the slow case: retry 201 { id, email, password: '$argon2id$...' }.
      expect({
        firstStatus: verifyMs > 400 ? first.status : 'answered',
        retry: retry.status,
        keys: Object.keys(retry.body as object).sort(),
        users: (users.rows[0] as { n: number }).n,
      }).toEqual({
        firstStatus: verifyMs > 400 ? 408 : 'answered',
        retry: 201,
        keys: ['email', 'id'],
        users: 1,
      });
      // The control's retry is a replay; after the timeout the late value (a class instance,
      // which only the app's serializer renders) was not stored: the retry ran it again.
      expect(retry.headers['idempotent-replayed']).toBe(verifyMs > 400 ? undefined : 'true');
    },
    20_000,
  );
});
