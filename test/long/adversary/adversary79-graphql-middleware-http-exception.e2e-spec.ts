import { ApolloDriver, type ApolloDriverConfig } from '@nestjs/apollo';
import { ForbiddenException, Module } from '@nestjs/common';
import {
  Args,
  Field,
  type FieldMiddleware,
  GraphQLModule,
  Int,
  Mutation,
  ObjectType,
  Query,
  Resolver,
} from '@nestjs/graphql';
import { type Pool } from 'pg';
import request from 'supertest';
import { IdempotencyModule, Idempotent } from '../../../lib/index.js';
import { type PoolApp, startPoolApp } from '../../support/pool-app.js';

/**
 * Adversary 79 (graphql): a field middleware that throws one of Nest's HTTP exceptions
 * (`ForbiddenException`, a permission check, the common use of field middleware) is answered
 * `FORBIDDEN` (with Nest's `originalError`: status 403) at the first call, and
 * `INTERNAL_SERVER_ERROR` (no status) on every replay.
 *
 * The app: `Transfer { id note: String }`, `note` behind Nest's field middleware `staffOnly`
 * (`const note = await next(); if (note.includes('secret')) throw new
 * ForbiddenException('staff only'); return note`); `createTransfer` with `@Idempotent()`;
 * Apollo on Express, Nest's defaults (`autoTransformHttpErrors`).
 *
 * Why: round 78's fix of adversary 75d stores a middleware field's own error as
 * `{ message, extensions }` only (`outputsIn`, lib/graphql/output-paths.ts: graphql-js's
 * `error.extensions`, which for an `HttpException` are empty), and the replay's wrapper
 * (`answerOutputsOf`, lib/graphql/middleware-outputs.ts) throws `new GraphQLError(message,
 * { extensions })`, no `originalError`. Nest's Apollo driver renders an error by its
 * `originalError` when it is an `HttpException` (code `FORBIDDEN`, `originalError: { message,
 * error, statusCode }`); the replay's has none, so Apollo's default writes
 * `INTERNAL_SERVER_ERROR`. A resolver's own `HttpException` is stored and thrown again as one
 * (`thrownError`, lib/graphql/thrown-error.ts, kind `http`); a middleware's is not.
 *
 * Docs (docs/guides/graphql.md, "Field middleware: its output, as the first answer gave it"):
 * "a field the first answer gave as null with its error ... answers that error again"; every
 * retry gets the first answer byte for byte; permanent errors are not answered as another
 * kind.
 *
 * Control (passes): the same mutation without `@Idempotent()` answers `FORBIDDEN` with the
 * `originalError`.
 *
 * Severity: medium (a permanent refusal, 403, turns into an internal server error on a
 * retry: clients and gateways read `INTERNAL_SERVER_ERROR` as a fault worth retrying or
 * alerting on, and the status 403 is gone).
 *
 * Fails now: the replay's error `extensions` are `{ code: "INTERNAL_SERVER_ERROR" }` (expected
 * `{ code: "FORBIDDEN", originalError: { message: "staff only", error: "Forbidden",
 * statusCode: 403 } }`).
 *
 * Suggested fix: store a middleware field's error as a resolver's is stored (the answer
 * hook's graphql-js error has `originalError`: keep it as a `FieldError`, field-answer.ts,
 * kind `http` for an `HttpException`) and throw it again with `thrownError` in the replay's
 * wrapper.
 *
 * Fixed: `outputsIn` (lib/graphql/output-paths.ts) stores what the middleware threw (the
 * error's `originalError`) as a resolver's error is (`fieldError`, `thrown`); the replay's
 * wrapper throws it again with `thrownError` (`fieldErrorAgain`,
 * lib/graphql/replayed-field-error.ts): an `HttpException` as one, rendered by its status.
 */
let pool: Pool;

/** Nest's field middleware: a note is for staff only. */
const staffOnly: FieldMiddleware = async (_ctx, next) => {
  const note = (await next()) as string;
  if (note.includes('secret')) throw new ForbiddenException('staff only');
  return note;
};

@ObjectType()
class Transfer {
  @Field(() => Int)
  id!: number;

  @Field({ nullable: true, middleware: [staffOnly] })
  note?: string;
}

async function createTransfer(note: string): Promise<Transfer> {
  const { rows } = await pool.query<{ id: number }>(
    'INSERT INTO transfers DEFAULT VALUES RETURNING id',
  );
  return { id: rows[0].id, note };
}

@Resolver(() => Transfer)
class TransfersResolver {
  @Query(() => Int)
  ping(): number {
    return 1;
  }

  @Mutation(() => Transfer, { nullable: true })
  @Idempotent()
  createTransfer(@Args('note') note: string): Promise<Transfer> {
    return createTransfer(note);
  }

  /** The control: the same mutation without the library. */
  @Mutation(() => Transfer, { nullable: true })
  createTransferPlain(@Args('note') note: string): Promise<Transfer> {
    return createTransfer(note);
  }
}

@Module({
  imports: [
    IdempotencyModule.forRootAsync({ useFactory: () => ({ globalKeys: true, pool }) }),
    GraphQLModule.forRoot<ApolloDriverConfig>({
      driver: ApolloDriver,
      autoSchemaFile: true,
      graphiql: false,
    }),
  ],
  providers: [TransfersResolver],
})
class TransfersModule {}

describe('adversary 79: a middleware that throws an HttpException', () => {
  let fixture: PoolApp;

  beforeAll(async () => {
    fixture = await startPoolApp('adv79_gql_mw_http_exception', {
      module: TransfersModule,
      max: 6,
      usePool: (started) => (pool = started),
      setup: async (admin) => {
        await admin.query('CREATE TABLE transfers (id serial PRIMARY KEY)');
      },
    });
  }, 60_000);

  afterAll(() => fixture?.close());

  const post = (key: string | undefined, query: string) => {
    const call = request(fixture.app.getHttpServer())
      .post('/graphql')
      .set('Content-Type', 'application/json');
    if (key) call.set('Idempotency-Key', key);
    return call.timeout(20_000).send(JSON.stringify({ query }));
  };

  const replayOf = (first: { body: Record<string, unknown> }) => ({
    ...first.body,
    extensions: { idempotency: { replayed: ['createTransfer'] } },
  });

  it('control: without @Idempotent(), the note is null with the Forbidden error', async () => {
    const first = await post(
      undefined,
      'mutation { createTransferPlain(note: "a secret") { id note } }',
    );
    expect(first.body.data).toEqual({
      createTransferPlain: { id: expect.any(Number), note: null },
    });
    expect(first.body.errors).toEqual([
      expect.objectContaining({
        message: 'staff only',
        path: ['createTransferPlain', 'note'],
        extensions: expect.objectContaining({ code: 'FORBIDDEN' }),
      }),
    ]);
  });

  it('a secret note: the Forbidden error answered, and replayed so', async () => {
    const query = 'mutation { createTransfer(note: "a secret") { id note } }';
    const first = await post('adv79-mw-http-bad', query);
    expect(first.body.errors?.[0]?.extensions?.code).toBe('FORBIDDEN');
    const again = await post('adv79-mw-http-bad', query);
    // Fails: the replay's error is INTERNAL_SERVER_ERROR, its originalError (403) gone.
    expect(again.body).toEqual(replayOf(first));
  });
});
