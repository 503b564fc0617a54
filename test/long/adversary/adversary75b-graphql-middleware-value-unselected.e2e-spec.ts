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
 * Adversary 75b: a Nest field middleware that filters (or masks) its field's VALUE by one of
 * the value's own fields answers otherwise on a replay: the comments it hid in the first
 * answer (a moderator deleted them) are shown to the retry.
 *
 * The app: `Post { id comments: [Comment] }`, `comments` behind Nest's field middleware
 * `hideDeleted` (`const comments = await next(); return comments.filter((c) => !c.deleted)`),
 * `Comment { id text deleted }`, the mutation `createPost(title)` with `@Idempotent()` and the
 * `Idempotency-Key` header, Apollo on Express. The client selects
 * `{ id comments { id text } }`.
 *
 * Why: round 75 (fdb3ef6) stores a middleware field "as a plain field": walkValue
 * (lib/graphql/wire-value.ts) walks the raw property with the field's type and the client's
 * selection, so each `Comment` keeps only its selected fields. The middleware's `next()` is
 * Nest's read of the property, so on a replay the middleware reads the STORED value, whose
 * items have no `deleted`: `fieldResolution` (resolved-fields.ts) keeps the unselected data of
 * the middleware's PARENT (`Post`, readParent), never of the value it is given. The filter
 * keeps every comment.
 *
 * Expected (docs/guides/graphql.md, "What is stored, and replayed"): "its middleware runs
 * again on a replay on that stored raw property"; "A replay's resolvers get the same values as
 * the first call's, and the answer is the same bytes".
 *
 * Control: the same mutation, the client also selecting `deleted`: the replay's middleware
 * reads it, the replay is the first answer; passes.
 *
 * Severity: high (a wrong answer on a replay, and what the app hides shown: a deleted comment
 * to a retry; the same for a middleware that masks an object's field by its `private` flag).
 *
 * Fails now: the replay's `comments` hold a second entry `{ text: "spam: buy now" }`.
 *
 * Suggested fix: a field behind field middleware is the middleware's input whole: walk its
 * value keeping the unselected own data of every object under it (as `keepsWhole` does for a
 * class-transformer class), or store the raw value as a `@ResolveField()`'s input is kept.
 *
 * Fixed: a field behind field middleware is walked with its whole data (walkValue,
 * lib/graphql/wire-value.ts: `keepsWhole || middleware`), so each comment keeps its unselected
 * `deleted` and the replay's middleware filters as the first call's did.
 */
let pool: Pool;

/** Nest's field middleware: the comments a moderator deleted are not shown. */
const hideDeleted: FieldMiddleware = async (_ctx, next) => {
  const comments = (await next()) as { deleted: boolean }[];
  return comments.filter((comment) => !comment.deleted);
};

@ObjectType()
class Comment {
  @Field(() => Int)
  id!: number;

  @Field()
  text!: string;

  @Field()
  deleted!: boolean;
}

@ObjectType()
class Post {
  @Field(() => Int)
  id!: number;

  @Field(() => [Comment], { middleware: [hideDeleted] })
  comments!: Comment[];
}

@Resolver(() => Post)
class PostsResolver {
  @Query(() => Int)
  ping(): number {
    return 1;
  }

  @Mutation(() => Post)
  @Idempotent()
  async createPost(@Args('title') title: string): Promise<Post> {
    const { rows } = await pool.query<{ id: number }>(
      'INSERT INTO posts (title) VALUES ($1) RETURNING id',
      [title],
    );
    const { rows: comments } = await pool.query<Comment>(
      `INSERT INTO comments (post_id, text, deleted)
       VALUES ($1, 'welcome', false), ($1, 'spam: buy now', true)
       RETURNING id, text, deleted`,
      [rows[0].id],
    );
    return { id: rows[0].id, comments };
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
  providers: [PostsResolver],
})
class PostsModule {}

describe("adversary 75b: a field middleware reading its value's unselected field, replayed", () => {
  let fixture: PoolApp;

  beforeAll(async () => {
    fixture = await startPoolApp('adv75b_gql_mw_value', {
      module: PostsModule,
      max: 6,
      usePool: (started) => (pool = started),
      setup: async (admin) => {
        await admin.query('CREATE TABLE posts (id serial PRIMARY KEY, title text NOT NULL)');
        await admin.query(
          'CREATE TABLE comments (id serial PRIMARY KEY, post_id int NOT NULL, text text NOT NULL, deleted boolean NOT NULL)',
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
    extensions: { idempotency: { replayed: ['createPost'] } },
  });

  it('control: the client selects deleted too, the replay is the first answer', async () => {
    const query = 'mutation { createPost(title: "hello") { id comments { id text deleted } } }';
    const first = await post('adv75b-mw-value-c', query);
    expect(first.body).toEqual({
      data: {
        createPost: {
          id: expect.any(Number),
          comments: [{ id: expect.any(Number), text: 'welcome', deleted: false }],
        },
      },
    });
    const again = await post('adv75b-mw-value-c', query);
    expect(again.body).toEqual(replayOf(first));
  });

  it('the client selects { id comments { id text } }: the replay is the first answer', async () => {
    const query = 'mutation { createPost(title: "hello") { id comments { id text } } }';
    const first = await post('adv75b-mw-value-a', query);
    expect(first.body).toEqual({
      data: {
        createPost: {
          id: expect.any(Number),
          comments: [{ id: expect.any(Number), text: 'welcome' }],
        },
      },
    });
    const again = await post('adv75b-mw-value-a', query);
    // Fails: the deleted comment "spam: buy now" is shown (its `deleted` was not stored).
    expect(again.body).toEqual(replayOf(first));
  });
});
