import { ApolloDriver, type ApolloDriverConfig } from '@nestjs/apollo';
import { Module } from '@nestjs/common';
import {
  Args,
  Context,
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
 * Fixed (session of 2026-12-07, fourth): one object at several places that no kept data reaches
 * back to has its first record's node named as its object (`s`) at each of its places
 * (object-nodes.ts `objectNodes`, used by wire-value.ts `writeParents`), so a replay adopts that
 * one node at every place: `repeated` answers false, true, true again.
 *
 * Adversary 111 (graphql, read-through of round 110's same-record.ts): one object answered at
 * several places of a mutation's value (a cart whose lines name the one product, as a
 * DataLoader gives its one cached entity for each repeated id) is ONE object at the first call,
 * handed to the `@ResolveField()` resolvers of every place. The walk stores its data once
 * (`recordOnce`: every place's `__parent` names the same node), but a replay builds a fresh
 * parent at each place and copies that node's data onto it: the one product is three objects.
 * A resolver that tells places of one entity apart by identity (a request-scoped `WeakSet` of
 * the products already rendered, to mark repeats) answers `repeated: false, true, true` at the
 * first call (as without the library) and `false, false, false` on every replay. The
 * back-reference case (`{ p, s }`, an object its own data reaches) is adopted as one node; an
 * object that no kept data reaches back to has no `s`, so nothing makes its places one.
 *
 * User code: `@ObjectType() Cart { id; items: [Item] }`, `Item { qty; product: Product }`,
 * `Product { id; name }` (its row has an unselected `sku`); the mutation returns `n` items
 * that all hold the same product object; `@ResolveField(() => Boolean) repeated(@Parent() p,
 * @Context() ctx)` answers whether `ctx.seen` (a `WeakSet` made per request in the
 * GraphQLModule's `context`) already holds `p`, then adds it; `@ResolveField() code(@Parent()
 * p)` reads the unselected `sku`; Apollo, code-first, `@Idempotent()` on the mutation.
 *
 * Code path: lib/graphql/wire-value.ts `writeParent` -> same-record.ts `recordOnce` (one record
 * for all places) -> `writeParents` (`parentRef(typed.roots[...], typed.nodes.get(source))`:
 * no `s`, the product itself is no node of the graph, only its record is) -> replay `fromWire`:
 * `restoreData(stored[PARENT], shared)` copies the record's node onto a new `value` per place;
 * `shared.adopt(parentRefSource(...) ?? leftOutSource(...) ?? ...)` is given undefined, so no
 * place is made the same object (parent-identity.ts `adoptsNode` / `ontoNode` never run).
 *
 * Docs quote (docs/guides/graphql.md): "one object answered at several places (a cart holding
 * the one product five times, as a DataLoader gives its one cached entity for each repeated
 * id) keeps its data there once, every place naming it, ... and a replay's resolvers get one
 * object there again"; "A replay's resolvers get the same values as the first call's, and the
 * answer is the same bytes".
 *
 * Severity: high (a committed mutation's answer replayed with other values, silently).
 *
 * Fails now (un-skipped): first `items[].product.repeated` false, true, true; the replay
 * answers false, false, false (the rest of the answer the same bytes). The same on Mercurius
 * (a probe of this app on `MercuriusDriver` with the fastify adapter: false, true, true first,
 * false, false, false replayed).
 *
 * Controls: the same app whose lines each hold their own copy of the product (`{ ...product }`)
 * answers false, false, false first and on the replay, the same bytes (the harness and the
 * resolvers are deterministic; only the identity of the places differs).
 *
 * Suggested fix: where several places' `__parent` name one record (`recordOnce` found it the
 * same), make the replay's parent at those places one object: write the source object itself
 * as a node (its `s`, as for a back-reference: `typed.nodes.get(source)`, or the record's own
 * node marked as the object) so that `adopt` makes every place that node; at least keep the
 * places of one source apart in the docs ("one object there again" holds only where another
 * kept object's data reaches it).
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
class Item {
  @Field(() => Int)
  qty!: number;

  @Field(() => Product)
  product!: Product;
}

@ObjectType()
class Cart {
  @Field(() => Int)
  id!: number;

  @Field(() => [Item])
  items!: Item[];
}

type ProductRow = Product & { sku: string };

interface RequestContext {
  seen: WeakSet<object>;
}

@Resolver(() => Product)
class ProductsResolver {
  @ResolveField(() => Boolean)
  repeated(@Parent() product: ProductRow, @Context() context: RequestContext): boolean {
    if (context.seen.has(product)) return true;
    context.seen.add(product);
    return false;
  }

  @ResolveField(() => String)
  code(@Parent() product: ProductRow): string {
    return product.sku.toUpperCase();
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
  async checkout(
    @Args('n', { type: () => Int }) n: number,
    @Args('shared', { type: () => Boolean }) shared: boolean,
  ): Promise<Cart> {
    const { rows } = await pool.query<{ id: number }>(
      'INSERT INTO carts DEFAULT VALUES RETURNING id',
    );
    // One product entity for every line that names it (a DataLoader's cached entity).
    const product: ProductRow = { id: 7, name: 'Tea', sku: 'tea-7' };
    // Or, for the control, a copy of it per line.
    const items = Array.from({ length: n }, (_, i) => ({
      qty: i + 1,
      product: shared ? product : { ...product },
    }));
    return { id: rows[0].id, items };
  }
}

@Module({
  imports: [
    IdempotencyModule.forRootAsync({ useFactory: () => ({ globalKeys: true, pool }) }),
    GraphQLModule.forRoot<ApolloDriverConfig>({
      driver: ApolloDriver,
      autoSchemaFile: true,
      graphiql: false,
      context: (): RequestContext => ({ seen: new WeakSet() }),
    }),
  ],
  providers: [CartsResolver, ProductsResolver],
})
class CartsModule {}

describe('adversary 111: one object at several places without a back-reference is several on a replay', () => {
  let fixture: PoolApp;

  beforeAll(async () => {
    fixture = await startPoolApp('adv111_gql_two_places', {
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

  const twice = async (key: string, shared: boolean) => {
    const query = `mutation { checkout(n: 3, shared: ${shared}) { id items { qty product { id code repeated } } } }`;
    const first = await post(key, query);
    const again = await post(key, query);
    // eslint-disable-next-line no-console
    console.log('TWO PLACES', first.text, again.text);
    const repeated = (body: {
      data: { checkout: { items: { product: { repeated: boolean } }[] } };
    }) => body.data.checkout.items.map((item) => item.product.repeated);
    return { first, again, repeated };
  };

  it('control: a copy of the product per line replays the same answer', async () => {
    const { first, again, repeated } = await twice('adv111-two-places-control', false);
    expect(first.body.errors).toBeUndefined();
    expect(repeated(first.body)).toEqual([false, false, false]);
    expect(again.body.extensions?.idempotency?.replayed).toEqual(['checkout']);
    expect(JSON.stringify(again.body.data)).toBe(JSON.stringify(first.body.data));
  });

  it('one product at three places is one object on the replay too', async () => {
    const { first, again, repeated } = await twice('adv111-two-places', true);
    expect(first.body.errors).toBeUndefined();
    // As without the library: the one object, rendered in full at its first place only.
    expect(repeated(first.body)).toEqual([false, true, true]);
    expect(again.body.extensions?.idempotency?.replayed).toEqual(['checkout']);
    expect(repeated(again.body)).toEqual([false, true, true]);
    expect(JSON.stringify(again.body.data)).toBe(JSON.stringify(first.body.data));
  });
});
