import { ApolloDriver, type ApolloDriverConfig } from '@nestjs/apollo';
import { Module } from '@nestjs/common';
import {
  Args,
  Field,
  GraphQLModule,
  Int,
  Mutation,
  ObjectType,
  Query,
  Resolver,
} from '@nestjs/graphql';
import { Exclude } from 'class-transformer';
import { type Pool } from 'pg';
import request from 'supertest';
import { IdempotencyModule, Idempotent } from '../../../lib/index.js';
import { type PoolApp, startPoolApp } from '../../support/pool-app.js';

/**
 * Fixed (session of 2026-12-07, third): as for `__parent` (adversary109-graphql-same-object-
 * places-stored-per-place): each place's `__kept` record is the record an earlier place of the
 * same object wrote where that holds the same (lib/graphql/same-record.ts `recordOnce`), one
 * node of the shared graph every place names (`{ p }`): the entity at five places is stored
 * and counted once (50,383 bytes), the mutation commits and replays the same bytes.
 *
 * Adversary 109 (graphql): one entity of a class class-transformer serializes (an `@Exclude()`d
 * column: the app's REST side uses `ClassSerializerInterceptor`) answered at N places of a
 * list (a cart holding the one loaded product five times, as a DataLoader gives the one cached
 * entity for each repeated id) keeps ALL its data under `__kept` once PER PLACE: each place a
 * node of its own, never the one node of the one object. `__kept` is never left out (a
 * serializer reads it as the answer), so 50 kB of data counts 250 kB against
 * `maxResponseBytes: 200_000`: the mutation is REFUSED (`response_too_large`, "nothing of the
 * mutation was committed"), where without the library it answers, and where its data fits
 * the limit four times over. The docs' warning is about a large column ("a large column the
 * client did not select can make the answer too large to store"), not about the same data
 * counted once per place.
 *
 * User code: `@ObjectType() class Product { @Field(() => Int) id; @Field() name; @Exclude()
 * description }` (class-transformer), `Cart { id; items: [Product] }`; `@Mutation(() => Cart)
 * @Idempotent() addToCart(productId, times)` returning `{ id, items: [product x times] }` (the
 * one `Product` instance); `maxResponseBytes: 200_000`; the client selects `items { id name }`;
 * Apollo, code-first.
 *
 * Code path: lib/graphql/wire-value.ts `walkValue` (`byClass`: a `kept` record made per place,
 * written into the shared graph as a node of its own per place) -> parent-data-within.ts
 * `parentDataWithin` (`pinned`: `__kept` never left out) -> the answer over the limit:
 * `response_too_large`, the transaction rolled back.
 *
 * Docs quote (docs/guides/graphql.md): "The data all the objects of one answer keep there (and
 * under `__kept`, below) is stored once, as one graph beside the answer: an object several of
 * them reach ... is written once, not once per object, so the stored answer grows with the
 * data"; "one object answered at two places ... is one object at both"; the design's promise
 * that the library refuses nothing that works without it but a misconfiguration.
 *
 * Severity: high (a mutation refused, its work not done, that works without the library; the
 * stored answer grows with places x data).
 *
 * Fails now (un-skipped): the first answer `{"errors":[{"message":"The field's answer is
 * larger than this mutation's maxResponseBytes (200000 bytes): it cannot be stored for
 * replays, so nothing of the mutation was committed.",...,"extensions":{"code":
 * "response_too_large","status":500}}],"data":null}`.
 *
 * Controls: the product twice is stored (100,226 bytes: two copies of the one description
 * already) and replays the same bytes.
 *
 * Suggested fix: write one `__kept` node per source object (a map from the object to its
 * node, as the graph does for objects its data reaches), each place naming it (`{ p }`), so
 * the one object is stored and counted once.
 */
let pool: Pool;

@ObjectType()
class Product {
  @Field(() => Int)
  id!: number;

  @Field()
  name!: string;

  @Exclude()
  description!: string;
}

@ObjectType()
class Cart {
  @Field(() => Int)
  id!: number;

  @Field(() => [Product])
  items!: Product[];
}

type ProductRow = Product & { description: string };

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
    const product = Object.assign(new Product(), {
      id: productId,
      name: 'Widget',
      description: 'd'.repeat(50_000),
    }) as ProductRow;
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
  providers: [CartsResolver],
})
class CartsModule {}

describe('adversary 109: one class-transformer entity at several places is kept once per place', () => {
  let fixture: PoolApp;

  beforeAll(async () => {
    fixture = await startPoolApp('adv109_gql_kept_places', {
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
    const query = `mutation { addToCart(productId: 7, times: ${times}) { id items { id name } } }`;
    const first = await post(key, query);
    const again = await post(key, query);
    // eslint-disable-next-line no-console
    console.log('KEPT PLACES', await stored(key), first.text, again.text.slice(0, 900));
    return { first, again, kept: await stored(key) };
  };

  it('control: the product twice replays the same bytes', async () => {
    const { first, again } = await twice('adv109-kept-twice-control', 2);
    expect(first.body.errors).toBeUndefined();
    expect(again.body.extensions?.idempotency?.replayed).toEqual(['addToCart']);
    expect(JSON.stringify(again.body.data)).toBe(JSON.stringify(first.body.data));
  });

  it('the one product five times is not refused as too large', async () => {
    const { first, again, kept } = await twice('adv109-kept-places', 5);
    expect(first.body.errors).toBeUndefined();
    expect(first.body.data.addToCart.items).toHaveLength(5);
    expect(again.body.extensions?.idempotency?.replayed).toEqual(['addToCart']);
    expect(again.body.errors).toBeUndefined();
    expect(JSON.stringify(again.body.data)).toBe(JSON.stringify(first.body.data));
    // The one object's data stored once, not once per place.
    expect(kept.map(([, copies]) => copies)).toEqual([1]);
  });
});
