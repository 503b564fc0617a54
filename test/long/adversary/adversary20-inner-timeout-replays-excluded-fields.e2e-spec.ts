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
    await sleep(body.verifyMs); // the e-mail verification service
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
      const first = await send(`signup-${verifyMs}`, email, verifyMs);
      await sleep(1_200); // the handler has settled and committed meanwhile
      const retry = await send(`signup-${verifyMs}`, email, verifyMs);
      // Observed for the slow case: retry 201 { id, email, password: '$argon2id$...' }.
      expect({
        firstStatus: verifyMs > 400 ? first.status : 'answered',
        retry: retry.status,
        replayed: retry.headers['idempotent-replayed'],
        keys: Object.keys(retry.body as object).sort(),
      }).toEqual({
        firstStatus: verifyMs > 400 ? 408 : 'answered',
        retry: 201,
        replayed: 'true',
        keys: ['email', 'id'],
      });
    },
    20_000,
  );
});
