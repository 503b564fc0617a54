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
 * takes those reads instead of reading as it goes. Here: a getter's later alias is read at its own response key's turn, after the fields between.
 *
 * Adversary 114 (graphql; alias reads of this session, alias-reads.ts): a getter's leaf field
 * under two aliases with ANOTHER getter field between them (`primary { a: url thumbUrl b: url }`),
 * both getters signed by one signer whose nonce counts up (a CDN's signed URLs). GraphQL resolves
 * an object's fields in the order of their response keys: `a` (url), `thumbUrl`, `b` (url), so
 * without the library the signatures are a n=1, thumbUrl n=2, b n=3. With `@Idempotent()` the
 * library reads `url` for all its aliases "one read right after the other" before the next field
 * (wire-value.ts `walkValue`: `readAliases()` in the `finally` right after the field's own read),
 * so the FIRST answer is a n=1, b n=2, thumbUrl n=3: `thumbUrl` and `b` swap signatures, and
 * every replay keeps that.
 *
 * User code: `@ObjectType() class Product { @Field(() => Int) id; @Field() get url() {
 * return signer.sign(path) } @Field() get thumbUrl() { return signer.sign(thumbPath) } }`,
 * one signer with a counting nonce; `@Mutation(() => Cart) @Idempotent() makeCart()` returning
 * `{ id, primary: new Product(4), lines }`; the client selects `primary { id a: url thumbUrl
 * b: url }`; Apollo, code-first.
 *
 * Code path: lib/graphql/wire-value.ts `walkValue` (per selected field NAME: the field's read,
 * then `readAliases()` for its later response keys, then the next field name), alias-reads.ts
 * `responseKeys` (per field, not interleaved with the other fields' keys).
 *
 * Docs quote (docs/guides/graphql.md): "So is such a getter's scalar or enum field (or list of
 * them) selected under several aliases at one place (`lines { a: url b: url }`): it is read
 * once per alias, one read right after the other as GraphQL reads them, and each alias answers
 * its own read, at the first call and on a replay." GraphQL does not read them one right
 * after the other when another field's key lies between; the promise: the first answer is
 * what the app answers without the library.
 *
 * Severity: high (the first answer differs from the app's own: two signatures are given to
 * other fields than without the library, and replays keep them).
 *
 * Fails now (un-skipped): without the library `{"primary":{"id":4,"a":"/p/4.jpg?n=1",
 * "thumbUrl":"/t/4.jpg?n=2","b":"/p/4.jpg?n=3"}}`; with it (first answer and replay)
 * `{"primary":{"id":4,"a":"/p/4.jpg?n=1","thumbUrl":"/t/4.jpg?n=3","b":"/p/4.jpg?n=2"}}`.
 *
 * Controls: the two aliases side by side, the other getter after them
 * (`primary { id a: url b: url thumbUrl }`), answer as without the library and replay the same
 * bytes. (On a LIST, even without aliases, the reads go field by field across the items:
 * adversary114-graphql-list-getters-read-field-major.)
 *
 * Suggested fix: walk an object's fields by response key in the selection's order (as
 * graphql-js' `collectFields` groups them), reading a repeated getter field's later key where
 * it comes and storing it under `__aliased`, not right after the field's first key; or state
 * in the guide that a getter's aliases are read one right after the other, before the fields
 * between them.
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

describe('adversary 114: a getter alias with another field between', () => {
  let fixture: PoolApp;

  beforeAll(async () => {
    fixture = await startPoolApp('adv114_gql_alias_between', {
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
    const plain = await post(`mutation { makeCartPlain { primary ${sel} } }`);
    const first = await post(`mutation { makeCart { primary ${sel} } }`, key);
    const again = await post(`mutation { makeCart { primary ${sel} } }`, key);
    // eslint-disable-next-line no-console
    console.log('ALIAS BETWEEN', sel, plain.text, first.text, again.text);
    return { plain, first, again };
  };

  it('control: the aliases side by side, the other getter after them, answer as without the library, and replay', async () => {
    const { plain, first, again } = await three(
      '{ id a: url b: url thumbUrl }',
      'adv114-between-ctl',
    );
    expect(first.body.errors).toBeUndefined();
    expect(JSON.stringify(first.body.data.makeCart)).toBe(
      JSON.stringify(plain.body.data.makeCartPlain),
    );
    expect(again.body.extensions?.idempotency?.replayed).toEqual(['makeCart']);
    expect(JSON.stringify(again.body.data)).toBe(JSON.stringify(first.body.data));
  });

  it('a getter alias after another getter field answers its own read, as without the library', async () => {
    const { plain, first, again } = await three('{ id a: url thumbUrl b: url }', 'adv114-between');
    expect(first.body.errors).toBeUndefined();
    expect(JSON.stringify(first.body.data.makeCart)).toBe(
      JSON.stringify(plain.body.data.makeCartPlain),
    );
    expect(again.body.extensions?.idempotency?.replayed).toEqual(['makeCart']);
    expect(JSON.stringify(again.body.data)).toBe(JSON.stringify(first.body.data));
  });
});
