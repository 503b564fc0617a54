import { ApolloDriver, type ApolloDriverConfig } from '@nestjs/apollo';
import { Module } from '@nestjs/common';
import {
  createUnionType,
  Field,
  GraphQLModule,
  ID,
  Int,
  InterfaceType,
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
 * Adversary 99 (graphql), the class of adversary99-graphql-renamed-object-field-parent: fields
 * renamed with `@Field({ name })` (a column's name kept as the class property) are read by
 * their property, and a replay answers them as the first call did: a renamed scalar (an `ID`
 * that was a number, which a `@ResolveField()` reads from its parent), a renamed object field
 * (its class's getter `fullName`), a renamed list of such objects, and a renamed field on an
 * interface's and a union's member. Each beside non-field data keyed `prototype` (the class of
 * adversary99-graphql-prototype-key-*).
 *
 * Fixed (session of 2026-12-06, sixth): written with the fix. lib/graphql/wire-value.ts
 * `walkValue` tells data that is no field by the fields' schema names and Nest's properties
 * (field-places.ts), and `fromWire` never writes `__parent`/`__kept` data over a stored
 * field's value.
 */
let pool: Pool;

@ObjectType()
class Person {
  @Field()
  first!: string;

  @Field()
  last!: string;

  @Field()
  get fullName(): string {
    return `${this.first} ${this.last}`;
  }
}

const person = (first: string, last: string) => Object.assign(new Person(), { first, last });

@InterfaceType({
  resolveType: (value: { kind?: string }) => (value.kind === 'film' ? 'Film' : 'Book'),
})
abstract class Work {
  @Field(() => Person, { name: 'creator' })
  maker!: Person;
}

@ObjectType({ implements: () => [Work] })
class Book extends Work {
  kind = 'book';

  @Field(() => [Person], { name: 'editors' })
  reviewers!: Person[];
}

@ObjectType({ implements: () => [Work] })
class Film extends Work {
  kind = 'film';

  @Field(() => Int, { name: 'minutes' })
  runtime!: number;
}

const Item = createUnionType({
  name: 'Item',
  types: () => [Book, Film] as const,
  resolveType: (value: { kind?: string }) => (value.kind === 'film' ? Film : Book),
});

@ObjectType()
class Post {
  @Field(() => ID, { name: 'code' })
  sku!: number;

  @Field(() => Person, { name: 'author' })
  writer!: Person;

  @Field(() => [Person], { name: 'editors' })
  reviewers!: Person[];

  /** Not a field: read by `firstStage`. */
  stages?: Record<string, Date>;
}

const STAGES = () => ({
  prototype: new Date('2027-01-15T00:00:00.000Z'),
  pilot: new Date('2027-03-01T00:00:00.000Z'),
});

@Resolver(() => Post)
class PostsResolver {
  @Query(() => Int)
  ping(): number {
    return 1;
  }

  @Mutation(() => Post)
  @Idempotent()
  async createPost(): Promise<Post> {
    const id = await insert();
    return {
      sku: id,
      writer: person('Ada', 'Lovelace'),
      reviewers: [person('Grace', 'Hopper'), person('Alan', 'Turing')],
      stages: STAGES(),
    };
  }

  @Mutation(() => Work)
  @Idempotent()
  async createWork(): Promise<Work> {
    await insert();
    return Object.assign(new Book(), {
      maker: person('Ursula', 'Le Guin'),
      reviewers: [person('Toni', 'Morrison')],
    });
  }

  @Mutation(() => Item)
  @Idempotent()
  async createItem(): Promise<typeof Item> {
    await insert();
    return Object.assign(new Film(), { maker: person('Agnès', 'Varda'), runtime: 90 });
  }

  /** What the property held: a number, on a replay too. */
  @ResolveField(() => String)
  skuType(@Parent() post: Post): string {
    return typeof post.sku;
  }

  @ResolveField(() => String)
  firstStage(@Parent() post: Post): string {
    return Object.keys(post.stages ?? {})[0] ?? 'none';
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
  providers: [PostsResolver],
})
class PostsModule {}

describe('adversary 99: fields renamed with @Field({ name }), replayed as first answered', () => {
  let fixture: PoolApp;

  beforeAll(async () => {
    fixture = await startPoolApp('adv99_gql_renamed_table', {
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

  it.each<[string, string, (data: Record<string, Record<string, unknown>>) => void]>([
    [
      'a renamed scalar read by a @ResolveField()',
      'mutation { createPost { code skuType } }',
      (data) => expect(data.createPost.skuType).toBe('number'),
    ],
    [
      'a renamed object field with a getter',
      'mutation { createPost { author { first fullName } } }',
      (data) => expect(data.createPost.author).toEqual({ first: 'Ada', fullName: 'Ada Lovelace' }),
    ],
    [
      'a renamed list of objects with a getter',
      'mutation { createPost { editors { fullName } } }',
      (data) =>
        expect(data.createPost.editors).toEqual([
          { fullName: 'Grace Hopper' },
          { fullName: 'Alan Turing' },
        ]),
    ],
    [
      'all of them beside non-field data keyed prototype',
      'mutation { createPost { code skuType firstStage author { fullName } editors { first } } }',
      (data) => {
        expect(data.createPost.firstStage).toBe('prototype');
        expect(data.createPost.skuType).toBe('number');
        expect(data.createPost.author).toEqual({ fullName: 'Ada Lovelace' });
      },
    ],
    [
      "a renamed field of an interface's member",
      'mutation { createWork { creator { fullName } ... on Book { editors { fullName } } } }',
      (data) =>
        expect(data.createWork).toEqual({
          creator: { fullName: 'Ursula Le Guin' },
          editors: [{ fullName: 'Toni Morrison' }],
        }),
    ],
    [
      "renamed fields of a union's member",
      'mutation { createItem { ... on Film { creator { fullName } minutes } } }',
      (data) =>
        expect(data.createItem).toEqual({ creator: { fullName: 'Agnès Varda' }, minutes: 90 }),
    ],
  ])('%s', async (name, query, check) => {
    const key = `adv99-renamed-table-${name.replace(/[^a-z]+/gi, '-')}`;
    const before = await count();
    const firstAnswer = await post(key, query);
    const again = await post(key, query);
    expect(firstAnswer.body.errors).toBeUndefined();
    check(firstAnswer.body.data);
    expect(again.body.errors).toBeUndefined();
    expect(again.body.data).toEqual(firstAnswer.body.data);
    expect(again.body.extensions).toEqual({ idempotency: { replayed: [expect.any(String)] } });
    expect(await count()).toBe(before + 1);
  });
});
