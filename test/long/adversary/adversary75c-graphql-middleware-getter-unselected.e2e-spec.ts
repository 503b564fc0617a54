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
 * Adversary 75c: the round 75b fix (a middleware field stored with its whole data, so a filter
 * by an item's unselected `deleted` filters again) misses an unselected field given by a
 * GETTER of the item's class: a middleware that hides deleted comments by a computed
 * `@Field() get deleted()` shows them to every retry.
 *
 * The app: `Post { id comments: [Comment] }`, `comments` behind Nest's field middleware
 * `hideDeleted` (`comments.filter((c) => !c.deleted)`), `Comment` an entity-like class whose
 * `deleted` is computed from its column:
 *
 *   @ObjectType() class Comment {
 *     @Field(() => Int) id!: number;
 *     @Field() text!: string;
 *     deletedAt!: Date | null;                       // its column, not in the schema
 *     @Field() get deleted(): boolean { return this.deletedAt !== null; }
 *   }
 *
 * `createPost(title)` with `@Idempotent()`, Apollo on Express; the client selects `{ id
 * comments { id text } }`.
 *
 * Why: walkValue (lib/graphql/wire-value.ts) walks the middleware's input with `whole`
 * (`keepsWhole || middleware`), which keeps `ownData(...)`: the unselected fields of the
 * type that are the item's OWN properties (`ownValue`); and `classGetters` (class-tree.ts),
 * for an instance of the Nest type, skips every name that is a field of the type (`name in
 * fields`). So an unselected field given through a getter is kept by neither, and it is not
 * named in the losses either (`classMembers(source, fields)` leaves fields out). The replay's
 * comment is a plain object naming the class (`INSTANCE`), without the getter: `c.deleted` is
 * undefined, and the filter keeps the deleted comment.
 *
 * Expected (docs/guides/graphql.md, "What is stored, and replayed"): "the field itself is
 * stored as its middleware's input: the property as Nest reads it ..., with all of its own
 * data, unselected fields included (a filter by a comment's `deleted` filters again)". Here
 * `deleted` is a field of the type, as Nest reads it (a getter is how a `@Field()` is
 * computed on a class), and it is not named in the losses. (The page's general rule, "a
 * field the operation does not select is neither read (a getter is not called ...)", is for a
 * value GraphQL reads; behind middleware the library already reads the class's other getters
 * for the replay, `classGetters`, and promises the middleware its input's unselected fields.)
 *
 * Control: the client also selects `deleted` (the walk reads the getter and stores it): the
 * replay is the first answer; passes.
 *
 * Severity: high (what the app hides is shown to a retry: a moderated comment; the same for a
 * mask by a computed `isPrivate`), silent to the app (by the code: no loss names it).
 *
 * Fails now: the replay's `comments` hold a second entry `{ text: "spam: buy now" }`.
 *
 * Suggested fix: behind middleware (and wherever `whole`), keep the unselected fields a
 * getter of the class gives too (read once, as `classGetters` reads the others: a field is
 * no reason to skip it there when it is not selected), or name it as a loss.
 *
 * Fixed: walkValue (lib/graphql/wire-value.ts) walks a middleware field's input in `'middleware'`
 * mode, which keeps its unselected fields' own data and, read once, those its class computes
 * (lib/graphql/middleware-extras.ts `getterFields`: a getter that throws or gives a Promise left
 * out).
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

  /** Its column: when a moderator deleted it. Not in the schema. */
  deletedAt!: Date | null;

  @Field()
  get deleted(): boolean {
    return this.deletedAt !== null;
  }
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
    const { rows: found } = await pool.query<{ id: number; text: string; deleted_at: Date }>(
      `INSERT INTO comments (post_id, text, deleted_at)
       VALUES ($1, 'welcome', NULL), ($1, 'spam: buy now', now())
       RETURNING id, text, deleted_at`,
      [rows[0].id],
    );
    // As an ORM hydrates its entities: instances of the class.
    const comments = found.map((row) =>
      Object.assign(new Comment(), { id: row.id, text: row.text, deletedAt: row.deleted_at }),
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

describe("adversary 75c: a field middleware reading its value's unselected getter field, replayed", () => {
  let fixture: PoolApp;

  beforeAll(async () => {
    fixture = await startPoolApp('adv75c_gql_mw_getter', {
      module: PostsModule,
      max: 6,
      usePool: (started) => (pool = started),
      setup: async (admin) => {
        await admin.query('CREATE TABLE posts (id serial PRIMARY KEY, title text NOT NULL)');
        await admin.query(
          'CREATE TABLE comments (id serial PRIMARY KEY, post_id int NOT NULL, text text NOT NULL, deleted_at timestamptz)',
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
    const first = await post('adv75c-mw-getter-c', query);
    expect(first.body).toEqual({
      data: {
        createPost: {
          id: expect.any(Number),
          comments: [{ id: expect.any(Number), text: 'welcome', deleted: false }],
        },
      },
    });
    const again = await post('adv75c-mw-getter-c', query);
    expect(again.body).toEqual(replayOf(first));
  });

  it('the client selects { id comments { id text } }: the replay is the first answer', async () => {
    const query = 'mutation { createPost(title: "hello") { id comments { id text } } }';
    const first = await post('adv75c-mw-getter-a', query);
    expect(first.body).toEqual({
      data: {
        createPost: {
          id: expect.any(Number),
          comments: [{ id: expect.any(Number), text: 'welcome' }],
        },
      },
    });
    const again = await post('adv75c-mw-getter-a', query);
    // Fails: the deleted comment "spam: buy now" is shown (its getter `deleted` was not stored).
    expect(again.body).toEqual(replayOf(first));
  });
});
