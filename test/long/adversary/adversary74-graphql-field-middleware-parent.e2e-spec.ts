import { ApolloDriver, type ApolloDriverConfig } from '@nestjs/apollo';
import { Module } from '@nestjs/common';
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
 * Adversary 74: a Nest field middleware (`@Field({ middleware: [...] })`, Nest's documented
 * way to mask a field) that reads another field of its parent answers otherwise on a
 * replay: the email it masked in the first answer (its profile private) is shown in clear
 * to the retry, as the replay's parent has no `visibility`.
 *
 * The app: `Profile { id visibility email }`, `email` behind Nest's field middleware
 * `maskPrivate` (`const value = await next(); return ctx.source.visibility === 'private' ?
 * '***' : value`), the mutation `createProfile(email, visibility)` with `@Idempotent()` and
 * the `Idempotency-Key` header, Apollo on Express. The client selects `{ id email }`.
 *
 * Why: what a replay keeps of an object for the code that reads it beside its fields is told
 * by `isResolvedByApp` (lib/graphql/resolved-fields.ts, used in wire-value.ts): Nest's
 * `@ResolveField()`s only. A field middleware wraps the field's resolver (its `source` is
 * the parent) but is no `@ResolveField()`: the object keeps its selected fields only, so
 * `visibility` (a field, not selected) is not stored, and the replay's middleware reads
 * `undefined`; the stored `email` is the raw value the library read, never the masked one.
 *
 * Expected (docs/guides/graphql.md, "What is stored, and replayed"): "A replay's resolvers
 * get the same values as the first call's, and the answer is the same bytes"; a retry "gets
 * that answer again". The replay is the first answer (the email masked), but for the marker.
 *
 * Control: the same mutation, the client also selecting `visibility`: the replay's middleware
 * reads it, the replay is the first answer; passes.
 *
 * Severity: high (a wrong answer on a replay, and what the app masks shown: a private email
 * in clear to a retry).
 *
 * Suggested fix: treat a field with Nest field middleware (its `@Field({ middleware })`, in
 * Nest's type metadata, or a schema field whose `resolve` is not the default) as the app's
 * resolver: keep its parent's unselected own data, as for a `@ResolveField()`.
 *
 * Fixed: `fieldsOfTypes` (nest-fields.ts) notes a field with Nest field middleware
 * (`middleware: true`), and `isResolvedByApp` (resolved-fields.ts) takes it for the app's, as
 * a `@ResolveField()`: its parent keeps its unselected own data (`visibility`), the field its
 * raw property as the middleware's input, and the replay's middleware masks it again. Apollo
 * Server wraps every field's resolver out of sight (`isApolloInstrumentation`), so Nest's
 * metadata tells it there; on Mercurius the schema does too.
 */
let pool: Pool;

/** Nest's field middleware, as its docs write one: the email masked on a private profile. */
const maskPrivate: FieldMiddleware = async (ctx, next) => {
  const value: unknown = await next();
  const source = ctx.source as { visibility?: string };
  return source.visibility === 'private' ? '***' : value;
};

@ObjectType()
class Profile {
  @Field(() => Int)
  id!: number;

  @Field()
  visibility!: string;

  @Field({ middleware: [maskPrivate] })
  email!: string;
}

@Resolver(() => Profile)
class ProfilesResolver {
  @Query(() => Int)
  ping(): number {
    return 1;
  }

  @Mutation(() => Profile)
  @Idempotent()
  async createProfile(
    @Args('email') email: string,
    @Args('visibility') visibility: string,
  ): Promise<Profile> {
    const { rows } = await pool.query<Profile>(
      'INSERT INTO profiles (email, visibility) VALUES ($1, $2) RETURNING id, email, visibility',
      [email, visibility],
    );
    return rows[0];
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
  providers: [ProfilesResolver],
})
class ProfilesModule {}

describe("adversary 74: a field middleware reading its parent's unselected field, replayed", () => {
  let fixture: PoolApp;

  beforeAll(async () => {
    fixture = await startPoolApp('adv74_gql_field_middleware', {
      module: ProfilesModule,
      max: 6,
      usePool: (started) => (pool = started),
      setup: async (admin) => {
        await admin.query(
          'CREATE TABLE profiles (id serial PRIMARY KEY, email text NOT NULL, visibility text NOT NULL)',
        );
      },
    });
  }, 60_000);

  afterAll(() => fixture?.close());

  const post = (key: string, query: string) =>
    request(fixture.app.getHttpServer())
      .post('/graphql')
      .set('Content-Type', 'application/json')
      .set('Idempotency-Key', key)
      .timeout(10_000)
      .send(JSON.stringify({ query }));

  const replayOf = (first: { body: Record<string, unknown> }) => ({
    ...first.body,
    extensions: { idempotency: { replayed: ['createProfile'] } },
  });

  it('control: the client selects visibility too, the replay is the first answer', async () => {
    const query =
      'mutation { createProfile(email: "grace@example.com", visibility: "private") ' +
      '{ id visibility email } }';
    const first = await post('adv74-middleware-c', query);
    expect(first.body).toEqual({
      data: { createProfile: { id: expect.any(Number), visibility: 'private', email: '***' } },
    });
    const again = await post('adv74-middleware-c', query);
    expect(again.body).toEqual(replayOf(first));
  });

  it('the client selects { id email }: the replay is the first answer, the email masked', async () => {
    const query =
      'mutation { createProfile(email: "ada@example.com", visibility: "private") { id email } }';
    const first = await post('adv74-middleware-a', query);
    expect(first.body).toEqual({
      data: { createProfile: { id: expect.any(Number), email: '***' } },
    });
    const again = await post('adv74-middleware-a', query);
    // Fails: email "ada@example.com" in clear (the middleware read visibility undefined).
    expect(again.body).toEqual(replayOf(first));
  });
});
