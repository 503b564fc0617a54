import { ApolloDriver, type ApolloDriverConfig } from '@nestjs/apollo';
import { Module } from '@nestjs/common';
import {
  Args,
  Field,
  GraphQLModule,
  Int,
  Mutation,
  ObjectType,
  Parent,
  Query,
  ResolveField,
  Resolver,
} from '@nestjs/graphql';
import { type Pool } from 'pg';
import request from 'supertest';
import { IdempotencyModule, Idempotent } from '../../../lib/index.js';
import { type PoolApp, startPoolApp } from '../../support/pool-app.js';

/**
 * Fixed (session of 2026-12-06 fifth): lib/graphql/kept-data.ts registers a superjson
 * rule for `Buffer` (its base64, read back with `Buffer.from`) and copies a Buffer as a typed
 * value, so a replay's parent holds a `Buffer` again.
 *
 * Adversary 93 (graphql): a `@ResolveField()` that reads its parent's `bytea` column (a
 * `Buffer`, as pg and TypeORM give it) gets, on a replay, a plain object (no `Buffer`, not
 * even the `Uint8Array` kept-data.ts says it comes back as): its `toString('base64')` is
 * `Object.prototype`'s, `"[object Object]"`. The replay answers other bytes than the first
 * answer, with no error (at most a line in the app's log at the first answer).
 *
 * User code: `@ObjectType() User { id, name }`, the row `SELECT id, name, avatar` (`avatar
 * bytea`, no `@Field()`: served as a data URL), `@ResolveField() avatarUrl(@Parent() user) {
 * return 'data:image/png;base64,' + user.avatar.toString('base64') }`; `createUser(name)` with
 * `@Idempotent()` returns the row; the client selects `{ id name avatarUrl }`; Apollo on
 * Express.
 *
 * Code path: lib/graphql/wire-value.ts `walkObject` keeps the non-field `avatar` in `KEPT`;
 * lib/graphql/kept-data.ts `keepData` writes it with superjson ("a `Buffer` it writes, but
 * cannot read": `TYPED_ARRAYS` has no `Buffer`), and the replay's parent holds a plain object
 * there; the loss is at most logged (`unfaithful`).
 *
 * Docs (docs/guides/graphql.md, "What the resolvers under it read, as they first read it"):
 * "each object also keeps ... what the stored fields would not give back: its own data that
 * is not a field (a `Date` stays a `Date`, a Prisma model's `BigInt` column a `BigInt`, and
 * `undefined`, a `Map`, a `Set`, a `RegExp` stay what they are) ... A replay's resolvers get
 * the same values as the first call's, and the answer is the same bytes."
 *
 * Severity: medium (a replay answers different bytes with no error: `avatarUrl`
 * `"data:image/png;base64,[object Object]"` for `"data:image/png;base64,iVBORw=="`; a Prisma 5
 * `Bytes` column and every TypeORM `bytea` are Buffers).
 *
 * Fails now (unskip the it.skip): replay `avatarUrl` is `"data:image/png;base64,[object Object]"`.
 * Control (passes): the same app, the resolver reading `Buffer.from(user.avatar)` (which
 * takes the plain object the replay gives too): the replay is the first answer.
 *
 * Suggested fix: register a superjson custom transformer for `Buffer` (`isApplicable:
 * Buffer.isBuffer`, serialize to base64, deserialize with `Buffer.from(v, 'base64')`) in
 * kept-data.ts, as the typed arrays are kept.
 */
let pool: Pool;

@ObjectType()
class User {
  @Field(() => Int)
  id!: number;

  @Field()
  name!: string;
}

@Resolver(() => User)
class UserFields {
  @ResolveField(() => String)
  avatarUrl(@Parent() user: { avatar: Buffer }): string {
    return `data:image/png;base64,${user.avatar.toString('base64')}`;
  }

  // The same, written so that it takes any byte array.
  @ResolveField(() => String)
  avatarUrlCopied(@Parent() user: { avatar: Buffer }): string {
    return `data:image/png;base64,${Buffer.from(user.avatar).toString('base64')}`;
  }
}

@Resolver(() => User)
class UsersResolver {
  @Query(() => Int)
  ping(): number {
    return 1;
  }

  @Mutation(() => User)
  @Idempotent()
  async createUser(@Args('name') name: string): Promise<User> {
    const { rows } = await pool.query<User & { avatar: Buffer }>(
      "INSERT INTO users (name, avatar) VALUES ($1, '\\x89504e47') RETURNING id, name, avatar",
      [name],
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
  providers: [UsersResolver, UserFields],
})
class UsersModule {}

describe("adversary 93: a @ResolveField() reads its parent's Buffer on a replay", () => {
  let fixture: PoolApp;

  beforeAll(async () => {
    fixture = await startPoolApp('adv93_gql_parent_buffer', {
      module: UsersModule,
      max: 6,
      usePool: (started) => (pool = started),
      setup: async (admin) => {
        await admin.query(
          'CREATE TABLE users (id serial PRIMARY KEY, name text NOT NULL, avatar bytea NOT NULL)',
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

  const replayed = async (key: string, field: string) => {
    const query = `mutation { createUser(name: "Ada") { id name ${field} } }`;
    const first = await post(key, query);
    expect(first.body.data.createUser[field]).toBe('data:image/png;base64,iVBORw==');
    const again = await post(key, query);
    expect(again.body).toEqual({
      ...first.body,
      extensions: { idempotency: { replayed: ['createUser'] } },
    });
  };

  it('control: the resolver copies the bytes with Buffer.from(): the replay is the first answer', async () => {
    await replayed('adv93-buffer-copied', 'avatarUrlCopied');
  });

  it("the resolver calls the Buffer's toString('base64'): the replay is the first answer", async () => {
    await replayed('adv93-buffer-own', 'avatarUrl');
  });
});
