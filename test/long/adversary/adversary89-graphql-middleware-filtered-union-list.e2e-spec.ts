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
 * Adversary 89 (graphql): inside a field-middleware output (`Order.shelf`), a list of a union
 * (`hits: [Hit]`, `Hit = Book | Author`) behind a field middleware of its own that leaves out
 * what the caller may not see (`hits.filter((hit) => !hit.hidden)`, the usual visibility
 * filter). The first answer gives `[{ title: 'Dune' }, { name: 'Herbert' }]`; the replay
 * answers `data: null`: its first item is rebuilt as an `Author` ("Cannot return null for
 * non-nullable field Author.name." at `hits.0.name`); with `__typename` selected, the second
 * is rebuilt as a `Book` (`field_not_stored` at `hits.1.title`).
 *
 * User code: `@Field(() => Shelf, { middleware: [visible] }) shelf` on Order; `@Field(() =>
 * [Hit], { middleware: [onlyPublic] }) hits` on Shelf; `createUnionType({ resolveType })` by
 * the row's `kind`; `createOrder` with `@Idempotent()` returns three hits, the first hidden;
 * Apollo on Express.
 *
 * Code path: lib/graphql/middleware-outputs.ts (the middleware wrapper's `mark`) ->
 * lib/graphql/item-indexes.ts `indexItems`: the walk of `shelf`'s output reads `hits` as the
 * property (the inner middleware's input, three items: the book at index 1), and the inner
 * `hits` wrapper walks its output (two items: the book at index 0), both at the same list path
 * `createOrder.shelf.hits`; `place` pushes both places for the same object, and
 * `itemIndexes` gives the first `resolveType()` of the book the first place noted (the raw
 * index 1): the stored answer's `members` are `{"shelf.hits.1":"Book","shelf.hits.2":"Author"}`
 * (read from the row in review), the raw list's places, where the answer's list has two
 * items: on the replay `hits.0` has no member (the app's `resolveType()` reads the rebuilt
 * item, which has no `kind`: `Author`) and `hits.1` is rebuilt as a `Book`.
 *
 * Docs (docs/guides/graphql.md, "Field middleware"): "a union's or an interface's member as the
 * first answer's `resolveType()` told it"; "A union's or an interface's member in a list is
 * noted at each place of the item"; "its input ... is read by the middleware alone, once".
 *
 * Severity: high: the replay of a committed order answers `data: null` (a wrong answer) where
 * the first answer gave the shelf.
 *
 * Fails now (unskip the it.skip cases and run this file): `data: null`, error
 * `Cannot return null for non-nullable field Author.name.` at `createOrder.shelf.hits.0.name`;
 * with `__typename`: `field_not_stored` for `Book.title` at `createOrder.shelf.hits.1.title`.
 * Control (passes): the same operation with no hidden hit (the filter gives the list as it
 * was: the two walks agree on each place).
 *
 * Suggested fix: in `indexItems`' walk of an output, do not descend into a field that is
 * behind middleware of its own (`fieldResolution(...) === 'middleware'`): its value is the
 * middleware's input, never what GraphQL completes; its own wrapper marks its output.
 *
 * Fixed (session of 2026-12-06, third): lib/graphql/item-indexes.ts `indexItems` no longer
 * walks into a field told `middleware` (`fieldResolution`): the outer walk leaves `hits` to
 * its own wrapper, which marks the filtered list it gives GraphQL, so each member is noted at
 * its index in the answer.
 */
let pool: Pool;

/** Nest's field middleware: the shelf as the caller may see it (here: as given). */
const visible: FieldMiddleware = async (_ctx, next) => {
  const shelf = (await next()) as Shelf;
  return { ...shelf };
};

/** Nest's field middleware: the hits the caller may see (hidden ones left out). */
const onlyPublic: FieldMiddleware = async (_ctx, next) => {
  const hits = (await next()) as { hidden?: boolean }[];
  return hits.filter((hit) => !hit.hidden);
};

@ObjectType()
class Book {
  @Field()
  title!: string;
}

@ObjectType()
class Author {
  @Field()
  name!: string;
}

const Hit = createUnionType({
  name: 'Hit',
  types: () => [Book, Author] as const,
  resolveType: (value: { kind: string }) => (value.kind === 'book' ? Book : Author),
});

@ObjectType()
class Shelf {
  @Field()
  label!: string;

  @Field(() => [Hit], { middleware: [onlyPublic] })
  hits!: (Book | Author)[];
}

@ObjectType()
class Order {
  @Field(() => Int)
  id!: number;

  @Field(() => Shelf, { middleware: [visible] })
  shelf!: Shelf;
}

@Resolver(() => Order)
class OrdersResolver {
  @Query(() => Int)
  ping(): number {
    return 1;
  }

  @Mutation(() => Order)
  @Idempotent()
  async createOrder(
    @Args('withHidden', { type: () => Boolean }) withHidden: boolean,
  ): Promise<Order> {
    const { rows } = await pool.query<{ id: number }>(
      'INSERT INTO orders DEFAULT VALUES RETURNING id',
    );
    const hits = [
      ...(withHidden ? [{ kind: 'author', name: 'Anonymous', hidden: true }] : []),
      { kind: 'book', title: 'Dune' },
      { kind: 'author', name: 'Herbert' },
    ] as unknown as (Book | Author)[];
    return { id: rows[0].id, shelf: { label: 'sf', hits } };
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
  providers: [OrdersResolver],
})
class OrdersModule {}

describe('adversary 89: a union list behind its own filtering middleware inside a middleware output', () => {
  let fixture: PoolApp;

  beforeAll(async () => {
    fixture = await startPoolApp('adv89_gql_mw_filtered_union', {
      module: OrdersModule,
      max: 6,
      usePool: (started) => (pool = started),
      setup: async (admin) => {
        await admin.query('CREATE TABLE orders (id serial PRIMARY KEY)');
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

  const replayOf = async (key: string, query: string) => {
    const firstAnswer = await post(key, query);
    expect(firstAnswer.body.errors).toBeUndefined();
    const again = await post(key, query);
    expect(again.body).toEqual({
      ...firstAnswer.body,
      extensions: { idempotency: { replayed: ['createOrder'] } },
    });
    return firstAnswer.body;
  };

  const selectHits = (withHidden: boolean) =>
    `mutation { createOrder(withHidden: ${withHidden}) { id shelf { label hits { ` +
    '... on Book { title } ... on Author { name } } } } }';

  it('control: no hit hidden (the middleware gives the list as it was): the replay is the first answer', async () => {
    const first = await replayOf('adv89-filtered-none', selectHits(false));
    expect(first.data.createOrder.shelf.hits).toEqual([{ title: 'Dune' }, { name: 'Herbert' }]);
  });

  it('a hidden hit left out by the middleware: the replay is the first answer', async () => {
    const first = await replayOf('adv89-filtered-hits', selectHits(true));
    expect(first.data.createOrder.shelf.hits).toEqual([{ title: 'Dune' }, { name: 'Herbert' }]);
  });

  it('a hidden hit left out, __typename selected: the replay is the first answer', async () => {
    await replayOf(
      'adv89-filtered-typename',
      'mutation { createOrder(withHidden: true) { id shelf { hits { __typename ' +
        '... on Book { title } ... on Author { name } } } } }',
    );
  });
});
