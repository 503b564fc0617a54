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
  SerializeOptions,
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
 * Adversary, round 23: round 20's leak, again, through plain data: `isPlainData` assumes only
 * class instances are reshaped by the app's serializer, but Nest's `ClassSerializerInterceptor`
 * reshapes plain objects too when the route says which class they are
 * (`@SerializeOptions({ type: UserEntity })`, Nest's serialization recipe for handlers that
 * return plain rows: "transform plain objects to the class instance").
 *
 * What the app does (Express, pool): `ClassSerializerInterceptor` global (`APP_INTERCEPTOR`),
 * `UserEntity` with `@Exclude() password`. `POST /users` inserts the user with pg and returns
 * the plain row it read back (`{ id, email, password }`, no class instance), the route
 * decorated `@SerializeOptions({ type: UserEntity })`, so every answer the app sends is
 * `{ id, email }`. Nest's timeout interceptor (`timeout(400)`) is written above `@Idempotent()`.
 * The e-mail verification is slow this time (800 ms); the client gets the 408 and retries.
 *
 * What happens: the late value is a plain object, `isPlainData` (lib/http/plain-data.ts:13-35)
 * says yes, settle-detached.ts:39-43 renders it with `JSON.stringify` past the global
 * serializer and commits it: the retry replays `{ id, email, password: "$argon2id..." }` for
 * the key's retention. The same holds for an outer timeout (the route's `timeout()` global).
 *
 * What should happen: transactions.md's failure table (the timeout rows) says a late value is
 * stored only as plain data because the app's layers (`ClassSerializerInterceptor`) "would have
 * shaped" a class instance and "rendered by the library, it could carry an `@Exclude()`d
 * field"; here the same layer shapes plain data, and the library stores the `@Exclude()`d
 * field. The control (fast verification) answers and replays `{ id, email }`.
 *
 * Why it matters: a password hash (or API secret) sent to a client on the retry of a slow
 * request, on Nest's documented serialization setup for raw rows (pg, Kysely, Drizzle and
 * Prisma all return plain objects, so `type` is how those apps use the serializer).
 * Severity: high (data leak), needs a timeout; the table's envelope sentence hints at
 * "interceptors that reshape plain data" but names the serializer as a class-instance layer.
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
  @SerializeOptions({ type: UserEntity })
  async create(
    @Body() body: { email: string; verifyMs: number },
  ): Promise<{ id: number; email: string; password: string }> {
    const hash = `$argon2id$v=19$hash-of-${body.email}`;
    const { rows } = await pool.query<{ id: number; email: string; password: string }>(
      'INSERT INTO users (email, password) VALUES ($1, $2) RETURNING id, email, password',
      [body.email, hash],
    );
    // The e-mail verification service (as fast as the test says for a retry, once recovered).
    const verifyMs = retryVerifyMs ?? body.verifyMs;
    retryVerifyMs = undefined;
    await sleep(verifyMs);
    return rows[0]; // a plain row: the serializer makes it a UserEntity (`type`)
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

describe('adversary 23: a late plain row replays the fields @SerializeOptions({ type }) strips', () => {
  let fixture: PoolApp;
  let app: INestApplication;

  beforeAll(async () => {
    fixture = await startPoolApp('adv23_serialize_type_leak', {
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
      // Observed for the slow case: retry 201 replayed { id, email, password: '$argon2id$...' }.
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
    },
    20_000,
  );
});
