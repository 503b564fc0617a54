import { ApolloDriver, type ApolloDriverConfig } from '@nestjs/apollo';
import { Module } from '@nestjs/common';
import { Field, GraphQLModule, Int, Mutation, ObjectType, Query, Resolver } from '@nestjs/graphql';
import { type Pool } from 'pg';
import request from 'supertest';
import { IdempotencyModule, Idempotent } from '../../../lib/index.js';
import { type PoolApp, startPoolApp } from '../../support/pool-app.js';

/**
 * Fixed (session of 2026-12-07): the walk of the answer reads its fields ahead, synchronously and
 * before any await, in the order graphql-js executes them (wire-value.ts `readAhead` /
 * `readObjectAhead`, ordered by read-order.ts `readOrder`: an object's fields by response key in
 * collected-selection order, each value depth-first, a list item after item); the walk then
 * takes those reads instead of reading as it goes. Here: a list's items are read item after item, each item's fields before the next item's.
 *
 * Adversary 114 (graphql; per-place and alias reads, placed-reads.ts, alias-reads.ts): two getter
 * fields of a list's items, both signed by one signer whose nonce counts up (a CDN's signed
 * URLs), selected as `lines { id url thumbUrl }`. GraphQL completes a list item by item, each
 * item's fields in order: line 5's url n=1, thumbUrl n=2, line 6's url n=3, thumbUrl n=4. With
 * `@Idempotent()` the library's walk of the answer (which reads each getter once, "never read
 * again by GraphQL") goes field by field across the items: every line's `url`, then every line's
 * `thumbUrl` (the items are walked at once, each stepping to its next field after an `await`),
 * so the FIRST answer is line 5 url n=1, thumbUrl n=3, line 6 url n=2, thumbUrl n=4, and every
 * replay keeps it. With aliases (`lines { a: url thumbUrl b: url }`) the signatures move
 * further still.
 *
 * User code: `@ObjectType() class Product { @Field(() => Int) id; @Field() get url() {
 * return signer.sign(path) } @Field() get thumbUrl() { return signer.sign(thumbPath) } }`,
 * one signer with a counting nonce; `@Mutation(() => Cart) @Idempotent() makeCart()` returning
 * `{ id, primary: new Product(4), lines: [new Product(5), new Product(6)] }`; the client selects
 * `lines { id url thumbUrl }`; Apollo, code-first.
 *
 * Code path: lib/graphql/wire-value.ts `walkValue` (a list's items walked concurrently, each
 * object's selected fields read one `await` apart), which reads the getters GraphQL then never
 * reads (placed-reads.ts, the Proxy's stored reads).
 *
 * Docs quote (docs/guides/graphql.md): "a getter (a signed URL's) and a Promise are read once
 * too, and the first answer is given what was read"; the promise: the first answer is what
 * the app answers without the library.
 *
 * Severity: high (the first answer differs from the app's own: the app's own code run
 * without the library gives other signatures to other fields; replays keep them).
 *
 * Fails now (un-skipped): without the library `[{"id":5,"url":"/p/5.jpg?n=1",
 * "thumbUrl":"/t/5.jpg?n=2"},{"id":6,"url":"/p/6.jpg?n=3","thumbUrl":"/t/6.jpg?n=4"}]`; with it
 * (first answer and replay) `[{"id":5,"url":"/p/5.jpg?n=1","thumbUrl":"/t/5.jpg?n=3"},
 * {"id":6,"url":"/p/6.jpg?n=2","thumbUrl":"/t/6.jpg?n=4"}]`.
 *
 * Controls: the same selection on one object (`primary { id url thumbUrl }`) answers as
 * without the library and replays the same bytes.
 *
 * Suggested fix: walk a list's items one after the other (each item's whole selection before
 * the next item's), or at least read each item's getters in one synchronous step before any
 * `await`, so the reads go in GraphQL's order; or state in the guide that getters of a list's
 * items are read field by field across the items.
 */
let pool: Pool;

/** A CDN signer whose nonce counts up, one signer for the app. */
const signer = {
  nonce: 0,
  sign(path: string): string {
    this.nonce += 1;
    return `${path}?n=${this.nonce}`;
  },
};

@ObjectType()
class Product {
  @Field(() => Int)
  id: number;

  constructor(id: number) {
    this.id = id;
  }

  @Field()
  get url(): string {
    return signer.sign(`/p/${this.id}.jpg`);
  }

  @Field()
  get thumbUrl(): string {
    return signer.sign(`/t/${this.id}.jpg`);
  }
}

@ObjectType()
class Cart {
  @Field(() => Int)
  id!: number;

  @Field(() => Product)
  primary!: Product;

  @Field(() => [Product])
  lines!: Product[];
}

const makeCart = async () => {
  const { rows } = await pool.query<{ id: number }>(
    'INSERT INTO carts DEFAULT VALUES RETURNING id',
  );
  signer.nonce = 0;
  return { id: rows[0].id, primary: new Product(4), lines: [new Product(5), new Product(6)] };
};

@Resolver(() => Cart)
class CartResolver {
  @Query(() => Int)
  ping(): number {
    return 1;
  }

  @Mutation(() => Cart)
  @Idempotent()
  async makeCart(): Promise<Cart> {
    return makeCart();
  }

  @Mutation(() => Cart)
  async makeCartPlain(): Promise<Cart> {
    return makeCart();
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
  providers: [CartResolver],
})
class CartModule {}

describe('adversary 114: list getters read field by field', () => {
  let fixture: PoolApp;

  beforeAll(async () => {
    fixture = await startPoolApp('adv114_gql_list_major', {
      module: CartModule,
      max: 4,
      usePool: (started) => (pool = started),
      setup: async (admin) => {
        await admin.query('CREATE TABLE carts (id serial PRIMARY KEY)');
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

  const three = async (sel: string, key: string) => {
    const plain = await post(`mutation { makeCartPlain ${sel} }`);
    const first = await post(`mutation { makeCart ${sel} }`, key);
    const again = await post(`mutation { makeCart ${sel} }`, key);
    // eslint-disable-next-line no-console
    console.log('LIST MAJOR', sel, plain.text, first.text, again.text);
    return { plain, first, again };
  };

  it('control: two getters of one object answer as without the library, and replay', async () => {
    const { plain, first, again } = await three(
      '{ primary { id url thumbUrl } }',
      'adv114-major-ctl',
    );
    expect(first.body.errors).toBeUndefined();
    expect(JSON.stringify(first.body.data.makeCart)).toBe(
      JSON.stringify(plain.body.data.makeCartPlain),
    );
    expect(again.body.extensions?.idempotency?.replayed).toEqual(['makeCart']);
    expect(JSON.stringify(again.body.data)).toBe(JSON.stringify(first.body.data));
  });

  it("two getters of a list's items are read item by item, as without the library", async () => {
    const { plain, first, again } = await three('{ lines { id url thumbUrl } }', 'adv114-major');
    expect(first.body.errors).toBeUndefined();
    expect(JSON.stringify(first.body.data.makeCart)).toBe(
      JSON.stringify(plain.body.data.makeCartPlain),
    );
    expect(again.body.extensions?.idempotency?.replayed).toEqual(['makeCart']);
    expect(JSON.stringify(again.body.data)).toBe(JSON.stringify(first.body.data));
  });
});
