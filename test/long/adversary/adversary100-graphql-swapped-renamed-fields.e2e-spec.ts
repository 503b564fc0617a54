/**
 * Adversary 100 (graphql): two fields renamed "across" each other with `@Field({ name })`,
 * where one field's class property is another field's schema name.
 *
 * User code: a class whose columns were renamed for the API, one onto the other's old name:
 *   `@Field({ name: 'label' }) title!: string;` and `@Field({ name: 'title' }) heading!: string;`
 *   and a `@ResolveField() shout(@Parent() post: Post) { return post.title.toUpperCase(); }`
 *   (the resolver reads the class property `title`, as Nest hands it the class instance).
 *   The same with the two swapped (`@Field({ name: 'b' }) a` and `@Field({ name: 'a' }) b`).
 *
 * Code path: lib/graphql/wire-value.ts `fromWire` (a renamed field's value is written under its
 * property only `if (!(property in stored))`: here the property `title` is the stored schema
 * field `title` (the `heading`), so the parent a replay hands `shout` has `title` = the
 * heading's value), with lib/graphql/field-places.ts `fieldPlaces` (walkValue stores both as
 * fields, nothing beside them).
 *
 * Docs quote (docs/guides/graphql.md): "Each field is read as Nest's code-first schema reads
 * it: by the class property its `@Field()` decorates ... A field renamed so ... is that field
 * under its property too" and "A replay's resolvers get the same values as the first call's,
 * and the answer is the same bytes."
 *
 * Severity: high (wrong answer replayed: the replay's `shout` is the heading's, not the
 * title's; for the swapped pair a `@ResolveField()` reading either property reads the other's).
 *
 * Fails now: with both selected, not even a `@ResolveField()` is needed: first answer
 * `{ label: 'Hello', title: 'World' }`, replay `{ label: 'World', title: 'World' }` (Nest's
 * resolver of `label` reads the property `title`, which the replay holds as the schema field
 * `title`, the heading); with `shout`, replay `shout: 'WORLD'` for `'HELLO'`. The swapped pair
 * replays `{ a: 'from-a', b: 'from-b', propertyA: 'from-b' }` for `{ a: 'from-b', b: 'from-a',
 * propertyA: 'from-a' }`: every value in the wrong place. Selecting only `label` replays well
 * (the control).
 *
 * Suggested fix: on a replay build the parent from the fields by their properties first (each
 * renamed field's value at its property, whether or not another field's schema name is that
 * property), and write a field under its schema name only where no field's property is that
 * name; or keep the resolver's object by property names only (what Nest's resolvers read).
 *
 * Fixed (session of 2026-12-06, sixth): `fromWire` writes each stored field at its property
 * only (never at its schema name when renamed: Nest reads a field only by its property), and
 * the failed, not-stored, Promise, getter and leaf-class marks at that same place; data kept
 * beside the fields is written only where no field's property is. Answers stored before the
 * fix hold the same wire form (fields by schema name) and replay right too.
 */
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

let pool: Pool;

@ObjectType()
class Post {
  @Field({ name: 'label' })
  title!: string;

  @Field({ name: 'title' })
  heading!: string;
}

@ObjectType()
class Pair {
  @Field({ name: 'b' })
  a!: string;

  @Field({ name: 'a' })
  b!: string;
}

@Resolver(() => Post)
class PostsResolver {
  @Query(() => Int)
  ping(): number {
    return 1;
  }

  @Mutation(() => Post)
  @Idempotent()
  async createPost(): Promise<Post> {
    await insert();
    return Object.assign(new Post(), { title: 'Hello', heading: 'World' });
  }

  @ResolveField(() => String)
  shout(@Parent() post: Post): string {
    return post.title.toUpperCase();
  }
}

@Resolver(() => Pair)
class PairsResolver {
  @Mutation(() => Pair)
  @Idempotent()
  async createPair(): Promise<Pair> {
    await insert();
    return Object.assign(new Pair(), { a: 'from-a', b: 'from-b' });
  }

  @ResolveField(() => String)
  propertyA(@Parent() pair: Pair): string {
    return pair.a;
  }
}

async function insert(): Promise<number> {
  const { rows } = await pool.query<{ id: number }>(
    'INSERT INTO posts DEFAULT VALUES RETURNING id',
  );
  return rows[0].id;
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
  providers: [PostsResolver, PairsResolver],
})
class PostsModule {}

describe("adversary 100: a renamed field whose property is another field's schema name", () => {
  let fixture: PoolApp;

  beforeAll(async () => {
    fixture = await startPoolApp('adv100_gql_swapped_renamed', {
      module: PostsModule,
      max: 6,
      usePool: (started) => (pool = started),
      setup: async (admin) => {
        await admin.query('CREATE TABLE posts (id serial PRIMARY KEY)');
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

  const count = async () =>
    (await pool.query<{ n: number }>('SELECT count(*)::int AS n FROM posts')).rows[0].n;

  const replays = async (key: string, query: string) => {
    const before = await count();
    const firstAnswer = await post(key, query);
    const again = await post(key, query);
    expect(await count()).toBe(before + 1);
    return { firstAnswer: firstAnswer.body as unknown, again: again.body as unknown };
  };

  it('control: one of the two renamed fields selected replays as first answered', async () => {
    const { firstAnswer, again } = await replays(
      'adv100-swapped-control',
      'mutation { createPost { label shout } }',
    );
    expect(firstAnswer).toEqual({ data: { createPost: { label: 'Hello', shout: 'HELLO' } } });
    expect((again as { data: unknown }).data).toEqual({
      createPost: { label: 'Hello', shout: 'HELLO' },
    });
  });

  it('both renamed fields selected replay as first answered', async () => {
    const { firstAnswer, again } = await replays(
      'adv100-swapped-both',
      'mutation { createPost { label title } }',
    );
    expect(firstAnswer).toEqual({ data: { createPost: { label: 'Hello', title: 'World' } } });
    expect((again as { data: unknown }).data).toEqual({
      createPost: { label: 'Hello', title: 'World' },
    });
  });

  it('a @ResolveField() reading the property `title` reads it on a replay as first', async () => {
    const { firstAnswer, again } = await replays(
      'adv100-swapped-chain',
      'mutation { createPost { label title shout } }',
    );
    expect(firstAnswer).toEqual({
      data: { createPost: { label: 'Hello', title: 'World', shout: 'HELLO' } },
    });
    expect((again as { data: unknown }).data).toEqual({
      createPost: { label: 'Hello', title: 'World', shout: 'HELLO' },
    });
  });

  it('a swapped pair: a @ResolveField() reading property `a` reads it on a replay', async () => {
    const { firstAnswer, again } = await replays(
      'adv100-swapped-pair',
      'mutation { createPair { a b propertyA } }',
    );
    expect(firstAnswer).toEqual({
      data: { createPair: { a: 'from-b', b: 'from-a', propertyA: 'from-a' } },
    });
    expect((again as { data: unknown }).data).toEqual({
      createPair: { a: 'from-b', b: 'from-a', propertyA: 'from-a' },
    });
  });
});
