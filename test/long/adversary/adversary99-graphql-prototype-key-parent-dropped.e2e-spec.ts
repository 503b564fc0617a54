import { ApolloDriver, type ApolloDriverConfig } from '@nestjs/apollo';
import { Module } from '@nestjs/common';
import {
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
 * Adversary 99 (graphql): a product's raw `stages` column (not a field: a JSON object of stage
 * name to due `Date`) is read by `@ResolveField(() => String) firstStage(@Parent() p)`, the
 * name of the earliest stage. One stage is named `prototype` (prototype, pilot, launch). The
 * first answer is `firstStage: "prototype"`; the replay of that same operation, marked
 * replayed, answers `firstStage: "none"`: the stored answer holds no `stages` at all, so the
 * replay's resolver read a parent without it. The answer is not the same bytes; a client
 * reading the replay acts on a different value. The same for a key `constructor` or
 * `__proto__` anywhere in the parent's non-field data, whatever its value: all of that
 * object's `__parent` data is left out, not only that member.
 *
 * User code: `@ObjectType() class Product { @Field(() => Int) id; @Field() name; stages?:
 * Record<string, Date> }`; `@ResolveField(() => String) firstStage(@Parent() p)` sorting
 * `Object.entries(p.stages)` by date; `@Mutation(() => Product) @Idempotent() createProduct()`
 * returning `{ id, name, stages: { prototype: new Date(..), pilot: .., launch: .. } }`; Apollo.
 *
 * Code path: lib/graphql/wire-value.ts `walkValue` puts the non-field `stages` in `parent`;
 * `writeParent` calls lib/graphql/kept-data.ts `keepData`, whose `restoreData(write(...))`
 * round trip throws in superjson's `deserialize` (its prototype-pollution guard refuses a
 * meta path through `prototype`, `constructor`, `__proto__`); `writeParent` catches it and
 * leaves out the whole `__parent`, with the loss "its own data beyond the answer has no JSON
 * form" (it has one: an object of Dates) in the app's log only.
 *
 * Docs (docs/guides/graphql.md, "What is stored, and replayed"): "Its own data that is not a
 * field (a column kept out of the schema) is kept too, under `__parent` (below), with its
 * types (a `Date` stays a `Date` ...)". "A replay's resolvers get the same values as the first
 * call's, and the answer is the same bytes."
 *
 * Severity: high (a wrong answer replayed: the first call's `firstStage` was `prototype`, the
 * replay's `none`; silently but for a log line that misnames the cause).
 *
 * Fails now (unskip the it.skip): first `{"data":{"createProduct":{"id":3,"firstStage":
 * "prototype"}}}`; replay `{"data":{"createProduct":{"id":3,"firstStage":"none"}},
 * "extensions":{"idempotency":{"replayed":["createProduct"]}}}`.
 * Control (passes): `createProductPlain`, the same resolver without `@Idempotent()`.
 *
 * Probed beside (kept-data.ts `keepData` called directly): the key alone suffices, whatever
 * its value: `{ m: { constructor: 'Bob' } }` (strings only) throws the same, and so does a JSON
 * column parsed with a `"__proto__"` key (`JSON.parse` makes it an own key): data a client
 * can write (a tags map, a word count, a submitted JSON document) reaches it.
 *
 * Suggested fix: in kept-data.ts, escape object keys superjson refuses before `serialize`
 * (or write such an object as a `Map`'s entries and read it back as an object), so that any
 * own key round-trips; a member that truly cannot be kept should be left out alone, not the
 * object's whole `__parent`, and the loss should name it.
 *
 * Fixed (session of 2026-12-06, sixth): lib/graphql/kept-data.ts escapes the keys superjson
 * refuses reversibly (`prototype` <-> `~prototype`, marked `keys: 1` in the record), so
 * `__parent` round-trips them as own keys in their order; `keepData` never throws, leaving
 * out (and naming) only a member with no typed JSON form, so `writeParent` no longer drops a
 * whole `__parent`. Unit specs: kept-data.spec.ts.
 */
let pool: Pool;

@ObjectType()
class Milestone {
  @Field()
  stage!: string;

  @Field()
  due!: string;
}

/** A product's stages, by name, each with its due date (a JSON column read back with Dates). */
type Stages = Record<string, Date>;

@ObjectType()
class Product {
  @Field(() => Int)
  id!: number;

  @Field()
  name!: string;

  /** Not a field: the raw stages column, which `nextStage` reads. */
  stages?: Stages;

  /** The raw input of the `milestones` field, which its `@ResolveField()` maps. */
  milestones?: Stages;
}

const STAGES = (): Stages => ({
  prototype: new Date('2027-01-15T00:00:00.000Z'),
  pilot: new Date('2027-03-01T00:00:00.000Z'),
  launch: new Date('2027-06-01T00:00:00.000Z'),
});

@Resolver(() => Product)
class ProductsResolver {
  @Query(() => Int)
  ping(): number {
    return 1;
  }

  @Mutation(() => Product)
  @Idempotent()
  async createProduct(): Promise<Product> {
    return this.make();
  }

  @Mutation(() => Product)
  createProductPlain(): Promise<Product> {
    return this.make();
  }

  private async make(): Promise<Product> {
    const { rows } = await pool.query<{ id: number }>(
      'INSERT INTO products DEFAULT VALUES RETURNING id',
    );
    return { id: rows[0].id, name: 'kettle', stages: STAGES(), milestones: STAGES() };
  }

  /** The first stage's name, from the raw column. */
  @ResolveField(() => String)
  firstStage(@Parent() product: Product): string {
    const stages = Object.entries(product.stages ?? {}).sort(
      ([, a], [, b]) => a.getTime() - b.getTime(),
    );
    return stages[0]?.[0] ?? 'none';
  }

  @ResolveField(() => [Milestone])
  milestones(@Parent() product: Product): Milestone[] {
    return Object.entries(product.milestones ?? {}).map(([stage, due]) => ({
      stage,
      due: due.toISOString().slice(0, 10),
    }));
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
  providers: [ProductsResolver],
})
class ProductsModule {}

describe("adversary 99: a stage named prototype in a parent's data", () => {
  let fixture: PoolApp;

  beforeAll(async () => {
    fixture = await startPoolApp('adv99_gql_prototype_parent', {
      module: ProductsModule,
      max: 6,
      usePool: (started) => (pool = started),
      setup: async (admin) => {
        await admin.query('CREATE TABLE products (id serial PRIMARY KEY)');
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
    (await pool.query<{ n: number }>('SELECT count(*)::int AS n FROM products')).rows[0].n;

  it('control: without the library, the same operation answers the product', async () => {
    const plain = await post(
      'adv99-proto-plain',
      'mutation { createProductPlain { id firstStage milestones { stage due } } }',
    );
    expect(plain.body.data.createProductPlain.firstStage).toBe('prototype');
    expect(plain.body.data.createProductPlain.milestones[0]).toEqual({
      stage: 'prototype',
      due: '2027-01-15',
    });
  });

  it('a @ResolveField() reading non-field data keyed prototype reads it again on a replay', async () => {
    const query = 'mutation { createProduct { id firstStage } }';
    const before = await count();
    const firstAnswer = await post('adv99-proto-parent', query);
    const again = await post('adv99-proto-parent', query);
    // eslint-disable-next-line no-console
    console.log('PARENT', firstAnswer.status, firstAnswer.text, again.status, again.text);
    expect(firstAnswer.body.data.createProduct.firstStage).toBe('prototype');
    expect(again.body.data).toEqual(firstAnswer.body.data);
    expect(await count()).toBe(before + 1);
  });
});
