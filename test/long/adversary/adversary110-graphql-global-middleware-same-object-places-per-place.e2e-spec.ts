import { ApolloDriver, type ApolloDriverConfig } from '@nestjs/apollo';
import { Module } from '@nestjs/common';
import {
  Args,
  Field,
  type FieldMiddleware,
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
 * Fixed (session of 2026-12-07, fourth): app-parents.ts `notedParent` now goes through
 * same-record.ts `recordOnce` (by its source object, per answer, as `writeParent` does): one
 * object at five places holding the same data is one record, written once into the outputs'
 * graph, every place's entry naming that node; the answer stores the description once.
 *
 * Adversary 110 (graphql): adversary 109's fix (one object at several places keeps its data
 * once: same-record.ts `recordOnce`, each place naming one node) is made for the mutation's
 * value's `__parent` only. Behind field middleware (Nest's docs' global logger in
 * `buildSchemaOptions.fieldMiddleware`, which puts every field behind middleware), each
 * place's `@ResolveField()` parent is a middleware output's parent, noted into the outputs'
 * graph once PER PLACE (app-parents.ts `notedParent`: a fresh record of its own data per
 * place, its 50 kB `description` string written again each time). The product at five
 * places of a cart (a DataLoader's one cached entity) keeps five copies (250 kB) against
 * `maxResponseBytes: 200_000`: the first places' parents are left out, and the replay's
 * `summary` reads no `description`: `data: null` with an INTERNAL_SERVER_ERROR, where the
 * first answer was complete (its data fits the limit four times over). Exactly adversary
 * 109's break, back for any app with a global field middleware.
 *
 * User code: adversary 109's app (`@ObjectType() Product { id; name }`, its `description`
 * column no field; `Cart { id; items: [Product] }`; `@ResolveField(() => String)
 * summary(@Parent() p) { return p.description.slice(0, 12) }`; `@Mutation(() => Cart)
 * @Idempotent() addToCart(productId, times)` returning the one loaded product `times` times;
 * `maxResponseBytes: 200_000`; the client selects `items { id summary }`; Apollo) with
 * `GraphQLModule.forRoot({ ..., buildSchemaOptions: { fieldMiddleware: [logger] } })`,
 * `logger = async (ctx, next) => { logged.push(ctx.info.fieldName); return next(); }`.
 *
 * Code path: lib/graphql/app-parents.ts `notedParent` (per place: `into.keep(data)` of a new
 * record, never `recordOnce`) -> `keptParents` (the outputs' graph: five nodes, each with
 * the description) -> over the limit, the largest parents left out -> replay
 * `parentData`: no data for the first places.
 *
 * Docs quote (docs/guides/graphql.md): "one object answered at several places (a cart
 * holding the one product five times, as a DataLoader gives its one cached entity for each
 * repeated id) keeps its data there once, every place naming it ... so it counts once
 * against `maxResponseBytes`, not once per place"; for middleware outputs' parents: "the
 * data of all such parents of one answer is stored once, as one graph beside its outputs";
 * "A replay's resolvers get the same values as the first call's, and the answer is the same
 * bytes".
 *
 * Severity: high (a committed mutation's every replay answers `data: null` and an error;
 * the stored answer grows with places x data).
 *
 * Fails now (un-skipped): the stored answer 150,869 bytes holding three copies of the
 * description (two places' parents left out); the first answer five `summary`
 * `dddddddddddd`, the replay `{"errors":[{"message":"Cannot read properties of undefined
 * (reading 'slice')","path":["addToCart","items",0,"summary"],...}],"data":null}`.
 *
 * Controls: the product twice replays the same bytes (100,472 bytes stored: two copies of
 * the one description already, under the limit).
 *
 * Suggested fix: note a middleware output's parent through `recordOnce` too (by its source
 * object, as `writeParent` does), each place naming the one node.
 */
let pool: Pool;
const logged: string[] = [];
const logger: FieldMiddleware = async (ctx, next) => {
  logged.push(ctx.info?.fieldName ?? '');
  return next();
};

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
      buildSchemaOptions: { fieldMiddleware: [logger] },
    }),
  ],
  providers: [CartsResolver, ProductsResolver],
})
class CartsModule {}

describe('adversary 110: behind a global field middleware one object at several places is kept once per place', () => {
  let fixture: PoolApp;

  beforeAll(async () => {
    fixture = await startPoolApp('adv110_gql_mw_places', {
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
    const { first, again } = await twice('adv110-mw-twice-control', 2);
    expect(first.body.errors).toBeUndefined();
    expect(logged.length).toBeGreaterThan(0);
    expect(again.body.extensions?.idempotency?.replayed).toEqual(['addToCart']);
    expect(JSON.stringify(again.body.data)).toBe(JSON.stringify(first.body.data));
  });

  it('the product five times is stored once and replays the same bytes', async () => {
    const { first, again, kept } = await twice('adv110-mw-places', 5);
    expect(first.body.errors).toBeUndefined();
    expect(first.body.data.addToCart.items).toHaveLength(5);
    expect(again.body.extensions?.idempotency?.replayed).toEqual(['addToCart']);
    expect(again.body.errors).toBeUndefined();
    expect(JSON.stringify(again.body.data)).toBe(JSON.stringify(first.body.data));
    // The one object's data stored once, not once per place.
    expect(kept.map(([, copies]) => copies)).toEqual([1]);
  });
});
