import { ApolloDriver, type ApolloDriverConfig } from '@nestjs/apollo';
import { Module } from '@nestjs/common';
import {
  Args,
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
 * Fixed (session of 2026-12-07, third): a walk builds each place's `__parent` record as before,
 * then gives it the record an earlier place of the same object wrote where that holds the same
 * (same own keys in order, each the same value: lib/graphql/same-record.ts `recordOnce`);
 * `writeParents` (wire-value.ts) writes each record once into the shared graph, and every place
 * names its one node (`{ p }`). The product at five places is stored once (50,424 bytes, one
 * copy of the description), under the limit, and replays the same bytes. Places whose
 * selections differ keep a record each (what their resolvers read differs).
 *
 * Adversary 109 (graphql): one object answered at N places of a list (a cart holding one
 * product five times, as a DataLoader gives the one cached entity for each repeated id) keeps
 * its unselected data (`description`, 50 kB, read by a `@ResolveField()`) once PER PLACE:
 * each place's `__parent` is a node of its own in the shared graph (`["o","description",
 * "<50000 chars>"]` five times), never the one node of the one object. The stored answer is
 * 250 kB for 50 kB of data, growing with places x data. Under `maxResponseBytes: 200_000` the
 * library leaves out the `__parent`s of the first places, and their replay parents are only
 * their answers: `summary` (a `String!`) throws and the replay answers `data: null` with an
 * INTERNAL_SERVER_ERROR, where the first answer was complete (its data fits the limit four
 * times over). With a back-reference (`line.order.lines[i]`, probe) the copies are N + 1: one
 * more for the object's own node (`s`).
 *
 * User code: `@ObjectType() Product { id; name }` (its `description` column no field),
 * `Cart { id; items: [Product] }`, `@ResolveField(() => String) summary(@Parent() p) {
 * return p.description.slice(0, 12) }`; `@Mutation(() => Cart) @Idempotent() addToCart(
 * productId, times)` returning `{ id, items: [product x times] }` (the one loaded product);
 * `maxResponseBytes: 200_000`; the client selects `items { id summary }`; Apollo.
 *
 * Code path: lib/graphql/wire-value.ts `walkValue` (a `parent` record made per place, written
 * into the shared graph as its own node: `parentRef(index)` per place) -> field-answer.ts
 * (the graph) -> parent-data-within.ts `parentDataWithin` (over the limit: the largest
 * `__parent`s left out) -> replay `fromWire`: no `__parent`, no data.
 *
 * Docs quote (docs/guides/graphql.md): "The data all the objects of one answer keep there
 * ... is stored once, as one graph beside the answer: an object several of them reach ... is
 * written once, not once per object, so the stored answer grows with the data, not with its
 * square"; "one object answered at two places ... is one object at both"; "A replay's
 * resolvers get the same values as the first call's, and the answer is the same bytes".
 *
 * Severity: high (a committed mutation's replay answers `data: null` and an error; the stored
 * answer grows with places x data, an unbounded cost for an ordinary repeated entity).
 *
 * Fails now (un-skipped): five copies (250 kB) are over the limit, so the first two places'
 * `__parent`s are left out and three copies stay (stored answer 150,464 bytes, three copies of
 * the description); the first answer `{"items":[{"id":7,"summary":"dddddddddddd"} x5]}`, the
 * replay `{"errors":[{"message":"Cannot read properties of undefined (reading 'slice')",
 * "path":["addToCart","items",0,"summary"],"extensions":{"code":"INTERNAL_SERVER_ERROR"}}],
 * "data":null}`.
 *
 * Controls: the same product twice replays the same bytes (its stored answer 100,268 bytes:
 * two copies of the one description already, under the limit).
 *
 * Suggested fix: write one `__parent` node per source object (a map from the object to its
 * node, as the graph does for objects its data reaches), each place naming it; or make a
 * parent's `__parent` its own node (`s`) where the graph has one.
 */
let pool: Pool;

@ObjectType()
class Product {
  @Field(() => Int)
  id!: number;

  @Field()
  name!: string;
}

@ObjectType()
class Cart {
  @Field(() => Int)
  id!: number;

  @Field(() => [Product])
  items!: Product[];
}

type ProductRow = Product & { description: string };

@Resolver(() => Product)
class ProductsResolver {
  @ResolveField(() => String)
  summary(@Parent() product: ProductRow): string {
    return product.description.slice(0, 12);
  }
}

@Resolver(() => Cart)
class CartsResolver {
  @Query(() => Int)
  ping(): number {
    return 1;
  }

  @Mutation(() => Cart)
  @Idempotent()
  async addToCart(
    @Args('productId', { type: () => Int }) productId: number,
    @Args('times', { type: () => Int }) times: number,
  ): Promise<Cart> {
    const { rows } = await pool.query<{ id: number }>(
      'INSERT INTO carts DEFAULT VALUES RETURNING id',
    );
    // The one loaded entity (a DataLoader's cache), at each place it is in the cart.
    const product: ProductRow = { id: productId, name: 'Widget', description: 'd'.repeat(50_000) };
    return { id: rows[0].id, items: Array.from({ length: times }, () => product) };
  }
}

@Module({
  imports: [
    IdempotencyModule.forRootAsync({
      useFactory: () => ({ globalKeys: true, pool, maxResponseBytes: 200_000 }),
    }),
    GraphQLModule.forRoot<ApolloDriverConfig>({
      driver: ApolloDriver,
      autoSchemaFile: true,
      graphiql: false,
    }),
  ],
  providers: [CartsResolver, ProductsResolver],
})
class CartsModule {}

describe('adversary 109: one object at several places keeps its data once per place', () => {
  let fixture: PoolApp;

  beforeAll(async () => {
    fixture = await startPoolApp('adv109_gql_places_stored', {
      module: CartsModule,
      max: 6,
      usePool: (started) => (pool = started),
      setup: async (admin) => {
        await admin.query('CREATE TABLE carts (id serial PRIMARY KEY)');
      },
    });
  }, 60_000);

  afterAll(() => fixture?.close());

  const post = (key: string, query: string) =>
    request(fixture.app.getHttpServer())
      .post('/graphql')
      .set('Content-Type', 'application/json')
      .set('Idempotency-Key', key)
      .timeout(60_000)
      .send(JSON.stringify({ query }));

  const stored = async (key: string) => {
    const { rows } = await fixture.admin.query<{ body: string }>(
      "SELECT convert_from(response_body, 'UTF8') AS body FROM idempotency_keys WHERE key LIKE $1",
      [`%${key}%`],
    );
    // The stored answer's bytes, and how many copies of the description it holds.
    return rows.map((row) => [row.body.length, row.body.split('d'.repeat(50_000)).length - 1]);
  };

  const twice = async (key: string, times: number) => {
    const query = `mutation { addToCart(productId: 7, times: ${times}) { id items { id summary } } }`;
    const first = await post(key, query);
    const again = await post(key, query);
    // eslint-disable-next-line no-console
    console.log('PLACES', await stored(key), first.text, again.text.slice(0, 600));
    return { first, again, kept: await stored(key) };
  };

  it('control: the product twice replays the same bytes', async () => {
    const { first, again } = await twice('adv109-twice-control', 2);
    expect(first.body.errors).toBeUndefined();
    expect(again.body.extensions?.idempotency?.replayed).toEqual(['addToCart']);
    expect(JSON.stringify(again.body.data)).toBe(JSON.stringify(first.body.data));
  });

  it('the product five times is stored once and replays the same bytes', async () => {
    const { first, again, kept } = await twice('adv109-places', 5);
    expect(first.body.errors).toBeUndefined();
    expect(first.body.data.addToCart.items).toHaveLength(5);
    expect(again.body.extensions?.idempotency?.replayed).toEqual(['addToCart']);
    expect(again.body.errors).toBeUndefined();
    expect(JSON.stringify(again.body.data)).toBe(JSON.stringify(first.body.data));
    // The one object's data stored once, not once per place.
    expect(kept.map(([, copies]) => copies)).toEqual([1]);
  });
});
