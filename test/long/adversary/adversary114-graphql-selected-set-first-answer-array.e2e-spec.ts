import { ApolloDriver, type ApolloDriverConfig } from '@nestjs/apollo';
import { Module } from '@nestjs/common';
import {
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
 * Fixed (session of 2026-12-07): wire-value.ts `walkValue` gives a selected list's value as
 * the app gave it (the Set itself, a typed array) where it is a built-in collection that reads
 * again alike and its items come back as they were (`rereadableList`,
 * lib/graphql/rereadable-lists.ts); only a one-shot iterable (a generator, a `Map`'s
 * `values()`) or an app class's own iterator is still given the array read once.
 *
 * Adversary 114 (graphql; Map/Set and list members of this session, list-members.ts): a
 * selected list field of scalars whose value is a `Set` (tags de-duplicated, as domain code
 * keeps them) on a type with a `@ResolveField()` that reads it as the Set it is
 * (`post.tags.size`). GraphQL takes any iterable for a list; without the library the resolver
 * reads the Set: `tagCount` 2. With `@Idempotent()` the FIRST call's resolver is given the
 * list the library read (an Array: `size` undefined), so the non-null `tagCount` fails and the
 * first answer is `data: null` with "Cannot return null for non-nullable field
 * Post.tagCount." for a committed mutation. The replay's resolver, run again on the stored
 * parent, reads the Set the library kept (`__parent`, typed-graph.ts 's' node) and answers
 * `tagCount: 2`: the replay is NOT the first answer (and the first answer is not the app's).
 * The same Set as a nullable field's value: first answer `null`, replay `2`.
 *
 * User code: `@ObjectType() class Post { @Field(() => Int) id; @Field(() => [String]) tags:
 * Set<string> }`, `@ResolveField(() => Int) tagCount(@Parent() post) { return post.tags.size }`;
 * `@Mutation(() => Post) @Idempotent() createPost()` returning `{ id, tags: new
 * Set(['nest', 'pg']) }`; the client selects `{ id tags tagCount }`; Apollo, code-first.
 *
 * Code path: lib/graphql/wire-value.ts `walkValue` (`materialized` reads the Set into an array,
 * the field is "replaced" and the first answer's Proxy answers that array to the resolver),
 * while the parent's kept data for a replay (`keeping.selectedInputs`, typed-graph.ts) keeps
 * the Set itself, which fromWire gives the replay's resolver.
 *
 * Docs quote (docs/guides/graphql.md): "a `Map`, a `Set`, a `RegExp` stay what they are";
 * "every replay answers the first answer byte for byte" (the promise); "A list GraphQL takes
 * as any iterable: a generator or a `Map`'s `values()` is read once, and the first answer is
 * given the list that was read and stored" (a Set can be read again: nothing says the
 * resolvers lose it, and the replay does not).
 *
 * Severity: high (the replay answers otherwise than the first answer; the first answer is
 * `data: null` where the app answers the post).
 *
 * Fails now (un-skipped): without the library `{"id":..,"tags":["nest","pg"],"tagCount":2}`;
 * first call `{"errors":[{"message":"Cannot return null for non-nullable field
 * Post.tagCount.",...}],"data":null}`; replay `{"data":{"createPost":{"id":..,"tags":
 * ["nest","pg"],"tagCount":2}}}`.
 *
 * The same with a typed array (`nums: Int32Array` as `[Int]`, a resolver reading
 * `post.nums.byteLength`): the first call's resolver reads an Array (`byteLength` undefined),
 * the replay's an Int32Array (12), seen in the review's scratch runs.
 *
 * Controls: the same Set, `tags` not selected (`{ tagCount }`), answers as without the library
 * (the Set kept as it is) and replays the same bytes.
 *
 * Suggested fix: give the first answer's resolvers the Set where a Set can be read again
 * (answer the read items to GraphQL's list completion only, or give a one-shot iterable's read
 * list to both the first answer's parent and the stored parent), so that the first call and
 * the replay read the same; at least keep the first call and the replay alike.
 */
let pool: Pool;

@ObjectType()
class Post {
  @Field(() => Int)
  id!: number;

  @Field(() => [String])
  tags!: Iterable<string>;
}

const create = async (): Promise<Post> => {
  const { rows } = await pool.query<{ id: number }>(
    'INSERT INTO posts DEFAULT VALUES RETURNING id',
  );
  return { id: rows[0].id, tags: new Set(['nest', 'pg', 'nest']) };
};

@Resolver(() => Post)
class PostsResolver {
  @ResolveField(() => Int)
  tagCount(@Parent() post: Post): number {
    return (post.tags as Set<string>).size;
  }

  @Query(() => Int)
  ping(): number {
    return 1;
  }

  @Mutation(() => Post)
  @Idempotent()
  async createPost(): Promise<Post> {
    return create();
  }

  @Mutation(() => Post)
  async createPostPlain(): Promise<Post> {
    return create();
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

describe('adversary 114: a selected Set is an Array at the first call, a Set on a replay', () => {
  let fixture: PoolApp;

  beforeAll(async () => {
    fixture = await startPoolApp('adv114_gql_selected_set', {
      module: PostsModule,
      max: 4,
      usePool: (started) => (pool = started),
      setup: async (admin) => {
        await admin.query('CREATE TABLE posts (id serial PRIMARY KEY)');
      },
    });
  }, 60_000);

  afterAll(() => fixture?.close());

  const post = (query: string, key?: string) => {
    const call = request(fixture.app.getHttpServer())
      .post('/graphql')
      .set('Content-Type', 'application/json')
      .timeout(60_000);
    if (key) call.set('Idempotency-Key', key);
    return call.send(JSON.stringify({ query }));
  };

  const three = async (sel: string, key: string) => {
    const plain = await post(`mutation { createPostPlain ${sel} }`);
    const first = await post(`mutation { createPost ${sel} }`, key);
    const again = await post(`mutation { createPost ${sel} }`, key);
    // eslint-disable-next-line no-console
    console.log('SELECTED SET', sel, plain.text, first.text, again.text);
    return { plain, first, again };
  };

  it('control: the Set unselected (`{ tagCount }`) answers as without the library, and replays', async () => {
    const { plain, first, again } = await three('{ tagCount }', 'adv114-set-ctl');
    expect(first.body.errors).toBeUndefined();
    expect(JSON.stringify(first.body.data.createPost)).toBe(
      JSON.stringify(plain.body.data.createPostPlain),
    );
    expect(again.body.extensions?.idempotency?.replayed).toEqual(['createPost']);
    expect(JSON.stringify(again.body.data)).toBe(JSON.stringify(first.body.data));
  });

  it('a Set answers as without the library, and the replay answers the first answer (round 114: found by review)', async () => {
    const { plain, first, again } = await three('{ tags tagCount }', 'adv114-set');
    expect(plain.body.data.createPostPlain).toEqual({ tags: ['nest', 'pg'], tagCount: 2 });
    expect(first.body.errors).toBeUndefined();
    expect(JSON.stringify(first.body.data.createPost)).toBe(
      JSON.stringify(plain.body.data.createPostPlain),
    );
    expect(again.body.extensions?.idempotency?.replayed).toEqual(['createPost']);
    expect(JSON.stringify(again.body.data)).toBe(JSON.stringify(first.body.data));
  });
});
