import { ApolloDriver, type ApolloDriverConfig } from '@nestjs/apollo';
import { Module } from '@nestjs/common';
import {
  Args,
  createUnionType,
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
 * Adversary 76: union members in a `Map` behind list middleware are replayed without their
 * member: the Map is kept as it is, never walked with the union, so no item is marked with the
 * member it was (`__replayedMember`), and the app's `resolveType()`, which tells the members by
 * their class (`value instanceof Book`), takes every replayed item for the other member. The
 * first answer is right; every replay answers errors (a `Book` read as a `Movie`).
 *
 * The user code (Apollo on Express):
 *
 *   @ObjectType() class Book { @Field() title!: string; @Field() author!: string; }
 *   @ObjectType() class Movie { @Field() title!: string; @Field(() => Int) minutes!: number; }
 *   const Saved = createUnionType({ name: 'Saved', types: () => [Book, Movie] as const,
 *     resolveType: (value) => (value instanceof Book ? Book : Movie) });
 *   const fromMap: FieldMiddleware = async (_ctx, next) => {
 *     const items = await next();
 *     return items instanceof Map ? [...items.values()] : items;
 *   };
 *   @ObjectType() class Shelf { @Field(() => Int) id; @Field(() => [Saved], { middleware: [fromMap] }) items; }
 *   @Mutation(() => Shelf) @Idempotent() saveShelf() { insert; return { id, items: new Map([[1, book], [2, movie]]) }; }
 *
 * Why: `fitsListType` (lib/graphql/middleware-input.ts) is false for a Map, so `walkValue`
 * (lib/graphql/wire-value.ts) keeps it with `keepInput` as typed JSON, its items plain
 * objects: they are never walked with the union (`memberType`), which is where a member's
 * `__typename` and the replay's member mark are written. On a replay the library's
 * `resolveType()` wrapper finds no mark and asks the app's, which sees plain objects.
 *
 * What the docs promise (docs/guides/graphql.md): "A member of a union or an interface is
 * stored as the type its `resolveType()` names ... with that `__typename`"; "every abstract
 * type's `resolveType()` answers a replay first from the first idempotent call of the schema
 * on"; behind middleware "a `Map` it maps to a list ... is kept as it is"; a retry gets the
 * stored answer.
 *
 * Control: the same items as an array behind the same middleware (walked with the union,
 * each marked): answered and replayed the same; the shelf committed once.
 *
 * Severity: medium (the mutation committed once; every replay an error where the first call
 * answered).
 *
 * Fails now: the replay's book is read as a `Movie`: "Cannot return null for non-nullable
 * field Movie.minutes.", `saveShelf` null.
 *
 * Suggested fix: walk a kept container's items with the list's item type (writing their
 * members, `__typename` and marks, as for an array's items), keeping the container's shape
 * around them; or store each item's member beside the container.
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

@ObjectType()
class Book {
  constructor(title: string, author: string) {
    this.title = title;
    this.author = author;
  }

  @Field()
  title: string;

  @Field()
  author: string;
}

@ObjectType()
class Movie {
  constructor(title: string, minutes: number) {
    this.title = title;
    this.minutes = minutes;
  }

  @Field()
  title: string;

  @Field(() => Int)
  minutes: number;
}

const Saved = createUnionType({
  name: 'Saved',
  types: () => [Book, Movie] as const,
  resolveType: (value) => (value instanceof Book ? Book : Movie),
});

/** Nest's field middleware: the shelf's items, kept by id, as a list. */
const fromMap: FieldMiddleware = async (_ctx, next) => {
  const items: unknown = await next();
  return items instanceof Map ? [...(items as Map<number, unknown>).values()] : items;
};

@ObjectType()
class Shelf {
  @Field(() => Int)
  id!: number;

  @Field(() => [Saved], { middleware: [fromMap] })
  items!: Map<number, Book | Movie> | (Book | Movie)[];
}

@Resolver(() => Shelf)
class ShelvesResolver {
  @Query(() => Int)
  ping(): number {
    return 1;
  }

  @Mutation(() => Shelf, { nullable: true })
  @Idempotent()
  async saveShelf(
    @Args('asArray', { type: () => Boolean, defaultValue: false }) asArray: boolean,
  ): Promise<Shelf> {
    const { rows } = await pool.query<{ id: number }>(
      'INSERT INTO shelves DEFAULT VALUES RETURNING id',
    );
    const items = [new Book('Dune', 'Herbert'), new Movie('Alien', 117)];
    return {
      id: rows[0].id,
      items: asArray ? items : new Map(items.map((item, i) => [i + 1, item])),
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
  providers: [ShelvesResolver],
})
class ShelvesModule {}

describe('adversary 76: union members in a Map behind list middleware', () => {
  let fixture: PoolApp;

  beforeAll(async () => {
    fixture = await startPoolApp('adv76_gql_mw_map_union', {
      module: ShelvesModule,
      max: 6,
      usePool: (started) => (pool = started),
      setup: async (admin) => {
        await admin.query('CREATE TABLE shelves (id serial PRIMARY KEY)');
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
    extensions: { idempotency: { replayed: ['saveShelf'] } },
  });

  const count = async () =>
    Number(
      (await fixture.admin.query<{ n: string }>('SELECT count(*) AS n FROM shelves')).rows[0].n,
    );

  const selection =
    '{ id items { __typename ... on Book { title author } ... on Movie { title minutes } } }';
  const items = [
    { __typename: 'Book', title: 'Dune', author: 'Herbert' },
    { __typename: 'Movie', title: 'Alien', minutes: 117 },
  ];

  it('control: the items as an array, answered and replayed', async () => {
    const query = `mutation { saveShelf(asArray: true) ${selection} }`;
    const before = await count();
    const first = await post('adv76-mw-map-union-c', query);
    expect(first.body).toEqual({ data: { saveShelf: { id: expect.any(Number), items } } });
    const again = await post('adv76-mw-map-union-c', query);
    expect(again.body).toEqual(replayOf(first));
    expect(await count()).toBe(before + 1);
  });

  it('the items as a Map: answered, and replayed the same', async () => {
    const query = `mutation { saveShelf ${selection} }`;
    const before = await count();
    const first = await post('adv76-mw-map-union-a', query);
    expect(first.body).toEqual({ data: { saveShelf: { id: expect.any(Number), items } } });
    const again = await post('adv76-mw-map-union-a', query);
    expect(await count()).toBe(before + 1);
    // Fails: the book read as a Movie, "Cannot return null for non-nullable field Movie.minutes.".
    expect(again.body).toEqual(replayOf(first));
  });
});
