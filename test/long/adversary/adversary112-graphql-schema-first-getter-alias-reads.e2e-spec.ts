import { ApolloDriver, type ApolloDriverConfig } from '@nestjs/apollo';
import { Module } from '@nestjs/common';
import { GraphQLModule, Mutation, Query, Resolver } from '@nestjs/graphql';
import { type Pool } from 'pg';
import request from 'supertest';
import { IdempotencyModule, Idempotent } from '../../../lib/index.js';
import { type PoolApp, startPoolApp } from '../../support/pool-app.js';

/**
 * Fixed (session of 2026-12-07): a getter's leaf field under several aliases is read once per
 * response key, one read right after the other as GraphQL reads them (alias-reads.ts); each
 * later alias's read that answers otherwise is stored beside the field (wire-value.ts
 * `walkValue`, the object's `__aliased`) and answered to its response key at its place, by the
 * field's wrapper (placed-reads.ts `placedRead`), at the first call and on a replay
 * (wire-value.ts `aliasReadsAgain`).
 * Here Apollo's own wrapper (its default cache-control plugin) is the field's resolver, which
 * the library wraps; a field with no resolver at all is read by the executor's, and its
 * aliases share the first read (docs/guides/graphql.md).
 *
 * Adversary 112 (graphql; the last hour's field-wrappers.ts `wrapsField`): a schema-first app
 * (`typeDefs`, Nest's schema-first road) whose object has a getter that answers afresh at each
 * read (a presigned URL, signed per read) selects the field under two aliases (`a: url b: url`).
 * Without the library graphql-js' default resolver reads the getter once per alias: `sig=1`,
 * `sig=2` for the first line, `sig=3`, `sig=4` for the next. With `@Idempotent()` the first
 * answer itself differs: both aliases answer ONE read (`sig=1`, `sig=1`; `sig=2`, `sig=2`;
 * ...), and the replay keeps it. Since wrapsField leaves a field without `resolve` alone, the
 * library's per-alias read (middleware-outputs.ts `answerAliasReadsOf`, placed-reads.ts) has no
 * resolver at that field to answer the second alias's own read, and the read the library made
 * is the one both aliases get. The docs say so only of one object at two places, not of
 * aliases at one place; and at two places (no aliases) this app answers as without the
 * library (the control), so the docs' caveat does not even describe what happens.
 *
 * User code: `typeDefs` `type Product { id: Int! url: String! } type Cart { id: Int! lines:
 * [Product!]! }`; `@Mutation() @Idempotent() makeCart()` returning `{ id, lines: [product,
 * product, product] }` (one DataLoader-cached `Product` instance, whose `get url()` signs per
 * read); the client selects `lines { id a: url b: url }`; Apollo.
 *
 * Code path: lib/graphql/field-wrappers.ts `wrapsField` (no wrapper on `Product.url`) ->
 * placed-reads.ts / middleware-outputs.ts `answerAliasReadsOf`: the library reads the getter
 * once for the place and the executor's default resolver then reads the library's view of the
 * source, which answers that read for every alias.
 *
 * Docs quote (docs/guides/graphql.md): "A getter GraphQL reads at each place of one such object
 * (a signed URL, signed afresh per read) is read once per place, and each place answers its own
 * read"; "the library never gives a resolver to a field that had none (a schema-first
 * `typeDefs` field ...) At such a field, one object at two places answers its first place's
 * read at both"; the promise: the first answer is what the app answers without the library.
 *
 * Severity: high (the first answer differs from the app's own: two aliases that the app signs
 * separately get one signature, and every replay keeps it).
 *
 * Fails now (un-skipped): without the library `{"lines":[{"id":5,"a":"...?sig=1","b":"...?sig=2"},
 * {"id":5,"a":"...?sig=3","b":"...?sig=4"},{"id":5,"a":"...?sig=5","b":"...?sig=6"}]}`; with it
 * (first answer and replay) `{"lines":[{"id":5,"a":"...?sig=1","b":"...?sig=1"},{"id":5,"a":
 * "...?sig=2","b":"...?sig=2"},{"id":5,"a":"...?sig=3","b":"...?sig=3"}]}`.
 *
 * Controls: the same app selecting `lines { id url }` (one read per place) answers as without
 * the library and replays the same bytes.
 *
 * Suggested fix: at a field the library does not wrap, never answer a read it made for the
 * executor's own read: let the source's view read the getter through for each alias (and place)
 * at the first call, recording each read in order; or, where that cannot be, say in the docs
 * that aliases of a schema-first getter field share one read.
 */
let pool: Pool;

const typeDefs = `
  type Product {
    id: Int!
    url: String!
  }
  type Cart {
    id: Int!
    lines: [Product!]!
  }
  type Query {
    ping: Int!
  }
  type Mutation {
    makeCart: Cart!
    makeCartPlain: Cart!
  }
`;

/** A product whose image URL is signed afresh at each read (a getter, as an S3 presigner). */
class Product {
  private signed = 0;

  constructor(readonly id: number) {}

  get url(): string {
    this.signed += 1;
    return `https://cdn.example/p/${this.id}?sig=${this.signed}`;
  }
}

const makeCart = async () => {
  const { rows } = await pool.query<{ id: number }>(
    'INSERT INTO carts DEFAULT VALUES RETURNING id',
  );
  // The one cached product (a DataLoader's) at each of its lines.
  const product = new Product(5);
  return { id: rows[0].id, lines: [product, product, product] };
};

@Resolver()
class CartResolver {
  @Query()
  ping(): number {
    return 1;
  }

  @Mutation()
  @Idempotent()
  async makeCart() {
    return makeCart();
  }

  @Mutation()
  async makeCartPlain() {
    return makeCart();
  }
}

@Module({
  imports: [
    IdempotencyModule.forRootAsync({ useFactory: () => ({ globalKeys: true, pool }) }),
    GraphQLModule.forRoot<ApolloDriverConfig>({
      driver: ApolloDriver,
      typeDefs,
      graphiql: false,
    }),
  ],
  providers: [CartResolver],
})
class CartModule {}

describe('adversary 112: schema-first getter at several places', () => {
  let fixture: PoolApp;

  beforeAll(async () => {
    fixture = await startPoolApp('adv112_gql_sf_getter', {
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
    const plain = await post(`mutation { makeCartPlain { lines ${sel} } }`);
    const first = await post(`mutation { makeCart { lines ${sel} } }`, key);
    const again = await post(`mutation { makeCart { lines ${sel} } }`, key);
    // eslint-disable-next-line no-console
    console.log('SF GETTER', sel, plain.text, first.text, again.text);
    return { plain, first, again };
  };

  it('control: one read per place answers as without the library, and replays', async () => {
    const { plain, first, again } = await three('{ id url }', 'adv112-sf-getter-control');
    expect(first.body.errors).toBeUndefined();
    expect(JSON.stringify(first.body.data.makeCart)).toBe(
      JSON.stringify(plain.body.data.makeCartPlain),
    );
    expect(again.body.extensions?.idempotency?.replayed).toEqual(['makeCart']);
    expect(JSON.stringify(again.body.data)).toBe(JSON.stringify(first.body.data));
  });

  it('two aliases of a getter field answer their own reads, as without the library', async () => {
    const { plain, first, again } = await three('{ id a: url b: url }', 'adv112-sf-getter');
    expect(first.body.errors).toBeUndefined();
    expect(JSON.stringify(first.body.data.makeCart)).toBe(
      JSON.stringify(plain.body.data.makeCartPlain),
    );
    expect(JSON.stringify(again.body.data)).toBe(JSON.stringify(first.body.data));
  });
});
