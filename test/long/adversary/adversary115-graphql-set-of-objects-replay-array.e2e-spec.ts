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
 * Fixed (session of 2026-12-07): the parent's kept data holds the list's shape (an empty collection
 * of its kind: an empty `Set`; lib/graphql/list-shapes.ts `listShape`), and a replay builds the
 * list rebuilt from the answer through it (`shapedList`, wire-value.ts `fromWire`): a `Set` of the
 * rebuilt items, in order.
 *
 * Adversary 115 (graphql; read-through of adversary 114's selected-Set fix,
 * rereadable-lists.ts): adversary 114's fix was shown with a `Set` of strings; here the
 * selected `Set` holds objects (`[Tag]`, plain data: tags de-duplicated by identity, as domain
 * code keeps related entities), on a type with a `@ResolveField()` that reads it as the Set it
 * is (`post.tags.size`). The FIRST call is right now: the Set is given as it is (its items come
 * back as they were), `tagCount: 2`. The REPLAY's resolver is given the list rebuilt from the
 * stored answer, an Array (`size` undefined): the non-null `tagCount` fails and the replay of a
 * committed mutation answers `data: null` with "Cannot return null for non-nullable field
 * Post.tagCount.", where the first call answered the post. With a Set of strings the Set is
 * kept beside the answer (`__parent`) and the replay answers 2 (the control).
 *
 * User code: `@ObjectType() class Tag { @Field() label }`; `@ObjectType() class Post {
 * @Field(() => Int) id; @Field(() => [Tag]) tags: Set<Tag> }`; `@ResolveField(() => Int)
 * tagCount(@Parent() post) { return post.tags.size }`; `@Mutation(() => Post) @Idempotent()
 * createPost()` returning `{ id, tags: new Set([{ label: 'NEST' }, { label: 'PG' }]) }`; the
 * client selects `{ tags { label } tagCount }`; Apollo, code-first.
 *
 * Code path: lib/graphql/wire-value.ts `walkValue` (the first answer is given the Set:
 * `rereadableList`), and the parent's kept data for a replay (`keeping.selectedInputs`): a
 * selected list of objects is rebuilt by `fromWire` from the answer's items (an Array), where a
 * selected list of leaves keeps the Set (typed-graph.ts 's' node); list-members.ts keeps only
 * an Array's own members (`Array.isArray(item)`), nothing of a Set.
 *
 * Docs quote (docs/guides/graphql.md): "(a `Set`, a `Map` or a typed array, which reads again
 * alike, is given as it is, so a resolver reading `post.tags.size` reads the `Set`, as on a
 * replay)"; "A replay's resolvers get the same values as the first call's".
 *
 * Severity: high (the replay of a committed mutation answers `data: null` where the first call
 * answered the post).
 *
 * Fails now (un-skipped): first call `{"data":{"createPost":{"tags":[{"label":"NEST"},
 * {"label":"PG"}],"tagCount":2}}}`; replay `{"errors":[{"message":"Cannot return null for
 * non-nullable field Post.tagCount.",...,"path":["createPost","tagCount"],...}],"data":null,
 * "extensions":{"idempotency":{"replayed":["createPost"]}}}`.
 *
 * Controls: a `Set` of strings (`[String]`, adversary 114's case) answers 2 at the first call
 * and on the replay.
 *
 * Suggested fix: where a selected list's value was a `Set` (a `Map`, a typed array), keep its
 * kind beside the answer (as list-members.ts keeps an Array's members) and give a replay's
 * parent a Set of the rebuilt items, in order.
 */
let pool: Pool;

@ObjectType()
class Tag {
  @Field()
  label!: string;
}

@ObjectType()
class Post {
  @Field(() => Int)
  id!: number;

  @Field(() => [Tag])
  tags!: Set<Tag>;
}

@ObjectType()
class Note {
  @Field(() => Int)
  id!: number;

  @Field(() => [String])
  tags!: Set<string>;
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
    return { id: await insert(), tags: new Set([{ label: 'NEST' }, { label: 'PG' }]) };
  }
}

@Resolver(() => Note)
class NotesResolver {
  @ResolveField(() => Int)
  tagCount(@Parent() note: Note): number {
    return note.tags.size;
  }

  @Mutation(() => Note)
  @Idempotent()
  async createNote(): Promise<Note> {
    return { id: await insert(), tags: new Set(['NEST', 'PG']) };
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
  providers: [PostsResolver, NotesResolver],
})
class PostsModule {}

describe("adversary 115: a selected Set of objects is an Array for a replay's resolver", () => {
  let fixture: PoolApp;

  beforeAll(async () => {
    fixture = await startPoolApp('adv115_gql_set_objects_replay', {
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

  const twice = async (query: string, key: string) => {
    const first = await post(query, key);
    const again = await post(query, key);
    // eslint-disable-next-line no-console
    console.log('SET OBJECTS', query, first.text, again.text);
    return { first, again };
  };

  it('control: a Set of strings reaches the resolver as the Set, at the first call and on a replay', async () => {
    const { first, again } = await twice(
      'mutation { createNote { tags tagCount } }',
      'adv115-set-objects-ctl',
    );
    expect(first.body.errors).toBeUndefined();
    expect(first.body.data.createNote).toEqual({ tags: ['NEST', 'PG'], tagCount: 2 });
    expect(again.body.extensions?.idempotency?.replayed).toEqual(['createNote']);
    expect(JSON.stringify(again.body.data)).toBe(JSON.stringify(first.body.data));
  });

  it("a Set of objects reaches a replay's resolver as the Set, as at the first call", async () => {
    const { first, again } = await twice(
      'mutation { createPost { tags { label } tagCount } }',
      'adv115-set-objects',
    );
    expect(first.body.errors).toBeUndefined();
    expect(first.body.data.createPost).toEqual({
      tags: [{ label: 'NEST' }, { label: 'PG' }],
      tagCount: 2,
    });
    expect(again.body.extensions?.idempotency?.replayed).toEqual(['createPost']);
    expect(again.body.errors).toBeUndefined();
    expect(JSON.stringify(again.body.data)).toBe(JSON.stringify(first.body.data));
  });
});
