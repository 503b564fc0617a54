import { ApolloDriver, type ApolloDriverConfig } from '@nestjs/apollo';
import { Module } from '@nestjs/common';
import { Field, GraphQLModule, Int, Mutation, ObjectType, Query, Resolver } from '@nestjs/graphql';
import { type Pool } from 'pg';
import request from 'supertest';
import { IdempotencyModule, Idempotent } from '../../../lib/index.js';
import { type PoolApp, startPoolApp } from '../../support/pool-app.js';

/**
 * Adversary 99 (graphql): `Post` exposes its `writer` property as the field `author`
 * (`@Field(() => Author, { name: 'author' }) writer`, the entity's column name kept); `Author`
 * has a getter field `fullName`. No `@ResolveField()`, no middleware: the plainest code-first
 * model. The first call of `mutation { createPost { id author { first fullName } } }` answers
 * `fullName: "Ada Lovelace"`; every replay of the same operation answers `data: null` with
 * "Cannot return null for non-nullable field Author.fullName." at
 * `createPost.author.fullName`: the committed mutation reads as failed (a client retries
 * under a new key: its effect twice). Were `fullName` nullable, the replay would answer it
 * `null`, silently. The whole author object is stored twice too (the field, and its raw data
 * again under `__parent`).
 *
 * User code: `@ObjectType() class Author { @Field() first; @Field() last; @Field() get
 * fullName() }`; `@ObjectType() class Post { @Field(() => Int) id; @Field(() => Author,
 * { name: 'author' }) writer: Author }`; `@Mutation(() => Post) @Idempotent() createPost()`
 * returning `{ id, writer: Object.assign(new Author(), { first, last }) }`; Apollo.
 *
 * Code path: lib/graphql/wire-value.ts `walkValue`: the loop over `Object.keys(source)` tests
 * `name in fields`, the schema's names (`author`), so the property `writer` is taken for data
 * that is no field and put in `parent` (`__parent`, 69456d2), as its raw instance's own data
 * (`keepData`: a plain `{ first, last }`, its getter lost); the field itself is stored by its
 * property (`nestField(...).property`) as the walked `Author` (with `fullName`). On a replay
 * `fromWire` sets the field's value under `author` and, renamed, under `writer`, then writes
 * `__parent` over it: `own(value, 'writer', { first, last })`, which Nest's resolver of
 * `author` reads: no `fullName`.
 *
 * Docs (docs/guides/graphql.md, "What is stored, and replayed"): "Each field is read as Nest's
 * code-first schema reads it: by the class property its `@Field()` decorates (`@Field({ name:
 * 'label' }) get display()` is read as `display`)"; "Its own data that is not a field (a
 * column kept out of the schema) is kept too, under `__parent`"; "A replay's resolvers get the
 * same values as the first call's, and the answer is the same bytes."
 *
 * Severity: high (a committed mutation replays as `data: null` with an error the first answer
 * did not have; with a nullable field, a wrong value replayed).
 *
 * Fails now (unskip the it.skip): first `{"data":{"createPost":{"id":2,"author":{"first":"Ada",
 * "fullName":"Ada Lovelace"}}}}`; replay `{"errors":[{"message":"Cannot return null for
 * non-nullable field Author.fullName.","path":["createPost","author","fullName"],...}],
 * "data":null,"extensions":{"idempotency":{"replayed":["createPost"]}}}`.
 * Control (passes): `createPostPlain`, the same resolver without `@Idempotent()`.
 *
 * Suggested fix: in `walkValue`, tell data that is no field by the type's Nest properties as
 * well as its schema names (skip a key that is `nestField(type, name).property` of a field);
 * in `fromWire`, never let `__parent`/`__kept` data overwrite a field's own stored value (nor
 * its renamed property).
 *
 * Fixed (session of 2026-12-06, sixth): `walkValue` tells data that is no field by the
 * fields' schema names and Nest's properties (lib/graphql/field-places.ts `fieldPlaces`), so
 * `writer` is stored as the field `author` only; unselected fields' own data is read and
 * kept under their properties; `fromWire` never writes `__parent`/`__kept` data over a place
 * a stored field was written to (`writesBesideFields`: fields win, but `undefined`, a
 * `defaultValue`'s input), so records stored before the fix replay right too; a `__kept`
 * value of a renamed field (an `ID` that was a number) is given under its property too. More
 * cases: adversary99-graphql-renamed-fields-table.e2e-spec.ts (renamed scalar, list, object,
 * interface and union members).
 */
let pool: Pool;

@ObjectType()
class Author {
  @Field()
  first!: string;

  @Field()
  last!: string;

  @Field()
  get fullName(): string {
    return `${this.first} ${this.last}`;
  }
}

@ObjectType()
class Post {
  @Field(() => Int)
  id!: number;

  /** Exposed as `author`; the property keeps the entity's column name. */
  @Field(() => Author, { name: 'author' })
  writer!: Author;
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
    return this.make();
  }

  @Mutation(() => Post)
  createPostPlain(): Promise<Post> {
    return this.make();
  }

  private async make(): Promise<Post> {
    const { rows } = await pool.query<{ id: number }>(
      'INSERT INTO posts DEFAULT VALUES RETURNING id',
    );
    return {
      id: rows[0].id,
      writer: Object.assign(new Author(), { first: 'Ada', last: 'Lovelace' }),
    };
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

describe('adversary 99: an object field renamed with @Field({ name })', () => {
  let fixture: PoolApp;

  beforeAll(async () => {
    fixture = await startPoolApp('adv99_gql_renamed_object', {
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

  it('control: without the library, the author is answered with its full name', async () => {
    const plain = await post(
      'adv99-renamed-plain',
      'mutation { createPostPlain { id author { fullName } } }',
    );
    expect(plain.body.data.createPostPlain.author).toEqual({ fullName: 'Ada Lovelace' });
  });

  it('the replay of a renamed object field answers it as the first call did', async () => {
    const query = 'mutation { createPost { id author { first fullName } } }';
    const before = await count();
    const firstAnswer = await post('adv99-renamed', query);
    const again = await post('adv99-renamed', query);
    // eslint-disable-next-line no-console
    console.log('RENAMED', firstAnswer.text, again.text);
    expect(firstAnswer.body.data.createPost.author).toEqual({
      first: 'Ada',
      fullName: 'Ada Lovelace',
    });
    expect(again.body.data).toEqual(firstAnswer.body.data);
    expect(again.body.errors).toBeUndefined();
    expect(await count()).toBe(before + 1);
  });
});
