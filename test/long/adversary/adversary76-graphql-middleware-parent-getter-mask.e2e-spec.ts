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
 * Adversary 76: a mask in field middleware that reads a computed field of its parent
 * (`@Field() get isPrivate()`, not selected) masks the email at the first answer and shows it
 * on every replay: the parent keeps its unselected fields' own data for the middleware, never
 * what its class computes, though the middleware's own input keeps exactly that.
 *
 * The user code (Apollo on Express):
 *
 *   const maskPrivate: FieldMiddleware = async (ctx, next) => {
 *     const email = await next();
 *     return (ctx.source as Profile).isPrivate ? '***' : email;
 *   };
 *   @ObjectType() class Profile {
 *     @Field(() => Int) id!: number;
 *     @Field({ middleware: [maskPrivate] }) email!: string;
 *     @Field() get isPrivate(): boolean { return this.visibility === 'private'; }
 *     visibility!: string; // a column, no field
 *   }
 *   @Mutation(() => Profile) @Idempotent() createProfile(...) { insert; return Object.assign(new Profile(), row); }
 *
 * and the client selects `{ id email }`.
 *
 * Why: `walkValue` (lib/graphql/wire-value.ts) sees a selected field behind middleware
 * (`resolutions.includes('middleware')`) and keeps the parent's unselected fields as extras:
 * `ownData(source, fields, selected)` only; `getterFields` (the fields a class computes) is
 * added only where `whole === 'middleware'`, i.e. for the middleware's own input. The
 * `visibility` column is kept, but the replay's parent is plain data: its `isPrivate` is not
 * there (no getter runs on a replay), so the mask reads `undefined`.
 *
 * What the docs promise (docs/guides/graphql.md): an object whose selected field "has other
 * code of the app's that reads its parent: Nest field middleware" keeps its unselected
 * fields' data; behind middleware "the fields its class computes (a `@Field() get
 * deleted()`, read once: a filter by a comment's `deleted` filters again ...)"; and of
 * round 74's case: "a mask by the parent's `visibility` masks again". A retry gets the first
 * answer's bytes but for the marker. (The same paragraph says the parent keeps "its
 * unselected fields' own data too (plain properties only: never a getter ...)": the
 * consequence, a mask by a computed field that no longer masks, is neither said nor logged;
 * the middleware's input keeps its computed fields, its parent does not.)
 *
 * Control: the same mask reading the parent's `visibility` column (`=== 'private'`):
 * masked at first and on the replay; the profile committed once.
 *
 * Severity: high (an email the app masks, shown to every retry).
 *
 * Fails now: the replay answers `email: "ada@example.com"`, the first answer `"***"`.
 *
 * Suggested fix: keep, for the parent of a field behind middleware, its unselected computed
 * fields too (`getterFields`, within the same budget), as for a middleware's input.
 *
 * Fixed (round 78): the library no longer reads nor stores a field middleware's input, and
 * never runs the middleware on a replay. The answer commits with the resolver's effects as
 * before (lib/graphql/run-field.ts `settle`), its middleware outputs pending; the operation's
 * answer hook (lib/graphql/replay-marker.ts: Apollo `willSendResponse`, Mercurius
 * `onResolution`) takes each middleware field's output from the answer's data, as the client
 * got it (masked by an outer serializer), and completes the stored answer with one fenced
 * UPDATE (`ClaimStore.completeAnswer`, lib/graphql/output-paths.ts `storeOutputsOf`). On a
 * replay a wrapper on each middleware field of the schema (lib/graphql/middleware-outputs.ts
 * `answerOutputsOf`) answers the stored output for its path, its scalars through
 * `parseValue()`; a replay meeting the outputs pending waits for them, bounded, then answers
 * `field_output_pending`. middleware-input.ts and middleware-extras.ts are gone.
 */
let pool: Pool;

/** Nest's field middleware: the email masked where the profile is private. */
const maskPrivate: FieldMiddleware = async (ctx, next) => {
  const email: unknown = await next();
  const profile = ctx.source as Profile;
  const hidden = profile.byColumn ? profile.visibility === 'private' : profile.isPrivate;
  return hidden ? '***' : email;
};

@ObjectType()
class Profile {
  @Field(() => Int)
  id!: number;

  @Field({ middleware: [maskPrivate] })
  email!: string;

  @Field()
  get isPrivate(): boolean {
    return this.visibility === 'private';
  }

  /** A column, no field. */
  visibility!: string;

  /** The control: the mask reads the column itself. */
  byColumn?: boolean;
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
    @Args('byColumn', { type: () => Boolean, defaultValue: false }) byColumn: boolean,
  ): Promise<Profile> {
    const { rows } = await pool.query<{ id: number; email: string; visibility: string }>(
      "INSERT INTO profiles (email, visibility) VALUES ($1, 'private') RETURNING id, email, visibility",
      [email],
    );
    return Object.assign(new Profile(), rows[0], { byColumn });
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

describe("adversary 76: a mask reading its parent's computed field", () => {
  let fixture: PoolApp;

  beforeAll(async () => {
    fixture = await startPoolApp('adv76_gql_mw_parent_getter', {
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
      .timeout(20_000)
      .send(JSON.stringify({ query }));

  const replayOf = (first: { body: Record<string, unknown> }) => ({
    ...first.body,
    extensions: { idempotency: { replayed: ['createProfile'] } },
  });

  const count = async () =>
    Number(
      (await fixture.admin.query<{ n: string }>('SELECT count(*) AS n FROM profiles')).rows[0].n,
    );

  it('control: the mask reads the visibility column, masked at first and on the replay', async () => {
    const query =
      'mutation { createProfile(email: "bo@example.com", byColumn: true) { id email } }';
    const before = await count();
    const first = await post('adv76-mw-parent-getter-c', query);
    expect(first.body).toEqual({
      data: { createProfile: { id: expect.any(Number), email: '***' } },
    });
    const again = await post('adv76-mw-parent-getter-c', query);
    expect(again.body).toEqual(replayOf(first));
    expect(await count()).toBe(before + 1);
  });

  it('the mask reads the computed isPrivate: masked at first and on the replay', async () => {
    const query = 'mutation { createProfile(email: "ada@example.com") { id email } }';
    const before = await count();
    const first = await post('adv76-mw-parent-getter-a', query);
    expect(first.body).toEqual({
      data: { createProfile: { id: expect.any(Number), email: '***' } },
    });
    const again = await post('adv76-mw-parent-getter-a', query);
    expect(await count()).toBe(before + 1);
    // Fails: the replay shows ada@example.com.
    expect(again.body).toEqual(replayOf(first));
  });
});
