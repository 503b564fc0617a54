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
 * Fixed (session of 2026-12-07): the first call's list of item views is built through the list's
 * shape as a replay's is (lib/graphql/list-shapes.ts `listShape`/`shapedList`, called by
 * wire-value.ts `walkValue`): a `Set` of the views, in the Set's order; a replay builds a `Set` of
 * the rebuilt items alike.
 *
 * Adversary 115 (graphql; read-through of adversary 114's selected-Set fix,
 * rereadable-lists.ts): a selected list field whose value is a `Set` of class instances with a
 * getter field (`Tag`'s `label`, computed from its `name`), on a type with a `@ResolveField()`
 * that reads the Set as the Set it is (`post.tags.size`). Adversary 114's fix gives the Set
 * as it is only where every item comes back as it was given (`items.every((item, i) =>
 * item.value === list[i])`); an item with a getter field the library read comes back as its
 * Proxy (the getter's read answered), so the list is "not the same" and the FIRST call's
 * resolver is given the array of Proxies: `size` undefined, the non-null `tagCount` fails, and
 * the first answer is `data: null` for a committed mutation where the app answers the post
 * (the replay answers `data: null` alike: a Set of objects reaches a replay's resolver as an
 * Array, adversary115-graphql-set-of-objects-replay-array).
 *
 * User code: `@ObjectType() class Tag { name; @Field() get label() { return
 * this.name.toUpperCase() } }`; `@ObjectType() class Post { @Field(() => Int) id; @Field(() =>
 * [Tag]) tags: Set<Tag> }`; `@ResolveField(() => Int) tagCount(@Parent() post) { return
 * post.tags.size }`; `@Mutation(() => Post) @Idempotent() createPost()` returning `{ id,
 * tags: new Set([new Tag('nest'), new Tag('pg')]) }`; the client selects `{ tags { label }
 * tagCount }`; Apollo, code-first.
 *
 * Code path: lib/graphql/wire-value.ts `walkValue`, list branch: `same = (list === value ||
 * rereadableList(value)) && items.every((item, i) => item.value === list[i])`, false where an
 * item is answered through its view (`replaced`: a getter's read), so `value: items.map(...)`,
 * an Array, is given to the first answer.
 *
 * Docs quote (docs/guides/graphql.md): "(a `Set`, a `Map` or a typed array, which reads again
 * alike, is given as it is, so a resolver reading `post.tags.size` reads the `Set`, as on a
 * replay)".
 *
 * Severity: high (by adversary 114's measure: the first answer of a committed mutation is
 * `data: null` where the app answers the post; every replay keeps it).
 *
 * Fails now (un-skipped): without the library `{"data":{"createPostPlain":{"tags":[{"label":
 * "NEST"},{"label":"PG"}],"tagCount":2}}}`; first call and replay `{"errors":[{"message":
 * "Cannot return null for non-nullable field Post.tagCount.",...,"path":["createPost",
 * "tagCount"],...}],"data":null}`.
 *
 * Controls: the same `Tag`s (getter field and all) in an Array, the resolver reading
 * `post.tags.length`: the first call answers as without the library, and the replay the same.
 *
 * Suggested fix: where the value is a rereadable collection, give it as it is even where its
 * items are answered through views (a Set of the views, in the Set's order; a typed array's
 * items are never views), or give the app's resolvers the Set itself and the list completion
 * the views; at least give the first call and the replay the same kind of collection.
 */
let pool: Pool;

@ObjectType()
class Tag {
  constructor(readonly name: string) {}

  @Field()
  get label(): string {
    return this.name.toUpperCase();
  }
}

@ObjectType()
class Post {
  @Field(() => Int)
  id!: number;

  @Field(() => [Tag])
  tags!: Set<Tag>;
}

@ObjectType()
class Listing {
  @Field(() => Int)
  id!: number;

  @Field(() => [Tag])
  tags!: Tag[];
}

const insert = async (): Promise<number> => {
  const { rows } = await pool.query<{ id: number }>(
    'INSERT INTO posts DEFAULT VALUES RETURNING id',
  );
  return rows[0].id;
};

@Resolver(() => Post)
class PostsResolver {
  @ResolveField(() => Int)
  tagCount(@Parent() post: Post): number {
    return post.tags.size;
  }

  @Query(() => Int)
  ping(): number {
    return 1;
  }

  @Mutation(() => Post)
  @Idempotent()
  async createPost(): Promise<Post> {
    return { id: await insert(), tags: new Set([new Tag('nest'), new Tag('pg')]) };
  }

  @Mutation(() => Post)
  async createPostPlain(): Promise<Post> {
    return { id: await insert(), tags: new Set([new Tag('nest'), new Tag('pg')]) };
  }
}

@Resolver(() => Listing)
class ListingsResolver {
  @ResolveField(() => Int)
  tagCount(@Parent() listing: Listing): number {
    return listing.tags.length;
  }

  @Mutation(() => Listing)
  @Idempotent()
  async createListing(): Promise<Listing> {
    return { id: await insert(), tags: [new Tag('nest'), new Tag('pg')] };
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
  providers: [PostsResolver, ListingsResolver],
})
class PostsModule {}

describe('adversary 115: a selected Set of getter objects is an Array at the first call', () => {
  let fixture: PoolApp;

  beforeAll(async () => {
    fixture = await startPoolApp('adv115_gql_set_getter_items', {
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

  const sel = '{ tags { label } tagCount }';

  it('control: an Array of the getter objects answers as without the library, and replays', async () => {
    const first = await post(`mutation { createListing ${sel} }`, 'adv115-set-items-ctl');
    const again = await post(`mutation { createListing ${sel} }`, 'adv115-set-items-ctl');
    // eslint-disable-next-line no-console
    console.log('SET ITEMS CTL', first.text, again.text);
    expect(first.body.errors).toBeUndefined();
    expect(first.body.data.createListing).toEqual({
      tags: [{ label: 'NEST' }, { label: 'PG' }],
      tagCount: 2,
    });
    expect(again.body.extensions?.idempotency?.replayed).toEqual(['createListing']);
    expect(JSON.stringify(again.body.data)).toBe(JSON.stringify(first.body.data));
  });

  it("a Set of objects with a getter field reaches the first call's resolver as the Set", async () => {
    const plain = await post(`mutation { createPostPlain ${sel} }`);
    const first = await post(`mutation { createPost ${sel} }`, 'adv115-set-items');
    const again = await post(`mutation { createPost ${sel} }`, 'adv115-set-items');
    // eslint-disable-next-line no-console
    console.log('FAILS', plain.text, first.text, again.text);
    expect(plain.body.data.createPostPlain).toEqual({
      tags: [{ label: 'NEST' }, { label: 'PG' }],
      tagCount: 2,
    });
    expect(first.body.errors).toBeUndefined();
    expect(JSON.stringify(first.body.data.createPost)).toBe(
      JSON.stringify(plain.body.data.createPostPlain),
    );
    expect(again.body.extensions?.idempotency?.replayed).toEqual(['createPost']);
    expect(JSON.stringify(again.body.data)).toBe(JSON.stringify(first.body.data));
  });
});
