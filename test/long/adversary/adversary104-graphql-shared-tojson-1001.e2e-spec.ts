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
 * Fixed (session of 2026-12-06, seventh): writeGraph counts, per object, only the `toJSON()` calls that give an object (the only ones that can lead back to a cycle); a primitive result (Money's string, a Decimal's digits) ends the chain, so one such object shared by any number of places is kept. Still a limit: one object whose `toJSON()` gives a new object each call, shared by more than 1,000 places, is taken for a cycle.
 *
 * Adversary 104 (graphql): one object with a `toJSON()` (a Decimal, a Luxon `DateTime`, a
 * money value) shared by more than 1,000 places of a parent's own data is taken for "a cycle
 * through toJSON()": the whole member holding it (a batch's 1,001 rows) is left out of the
 * kept data, though JSON writes it at once. A replay's `@ResolveField()` then reads no rows:
 * the first answer says 1001, every replay 0. The app's log says the rows have "no JSON
 * form", which is false.
 *
 * User code: `class Money { toJSON() { return String(this.cents) } }`; `const eur = new
 * Money(500)`; `@ObjectType() class Batch { @Field(() => Int) id }`; `@Mutation(() => Batch)
 * @Idempotent() importPrices()` inserting a row and returning `Object.assign(row, { rows:
 * skus.map((sku) => ({ sku, price: eur })) })` (1,001 skus, all at the same price object);
 * `@ResolveField(() => Int) imported(@Parent() b) { return b.rows?.length ?? 0 }`; Apollo.
 *
 * Code path: lib/graphql/typed-graph.ts `writeGraph` `cell()`: `jsonCalls` counts every call
 * of one object's `toJSON()` over the WHOLE write (every place it is referenced), not along
 * one chain of `toJSON()` results, and throws 'a cycle through toJSON()' past
 * `MAX_JSON_CALLS` (1,000); the root-member loop catches it and leaves the member out
 * (`notes.left`), lib/graphql/kept-data.ts `keepData` names it "with no JSON form".
 *
 * Docs (docs/guides/graphql.md, "What the resolvers under it read, as they first read it"):
 * "Its own data that is not a field ... is kept too, under `__parent` ..."; "A replay's
 * resolvers get the same values as the first call's"; only a member with no JSON form ("a
 * cycle through a `toJSON()`") is left out.
 *
 * Severity: medium (the replay answers another value at the field; the log says so, wrongly
 * as "no JSON form"; the effect is not repeated).
 *
 * Fails now (unskip the it.skip): first `imported: 1001`, replay `imported: 0`.
 * Control (passes): 1,000 rows at the same price object replay `imported: 1000`.
 *
 * Suggested fix: count `toJSON()` calls along one chain only (reset per `cell()` call: a
 * `toJSON()` giving an object whose `toJSON()` gives ... 1,000 times), or memoise each
 * object's `toJSON()` result per write (JSON calls it at each place, but a shared object's
 * result is the same data).
 */
let pool: Pool;

class Money {
  constructor(readonly cents: number) {}

  toJSON(): string {
    return String(this.cents);
  }
}

@ObjectType()
class Batch {
  @Field(() => Int)
  id!: number;
}

type BatchRow = Batch & { rows?: { sku: string; price: Money }[] };

@Resolver(() => Batch)
class BatchesResolver {
  @Query(() => Int)
  ping(): number {
    return 1;
  }

  @Mutation(() => Batch)
  @Idempotent()
  async importPrices(@Args('count', { type: () => Int }) count: number): Promise<BatchRow> {
    const { rows } = await pool.query<Batch>('INSERT INTO batches DEFAULT VALUES RETURNING id');
    const eur = new Money(500);
    const skus = Array.from({ length: count }, (_, i) => `sku-${i}`);
    return Object.assign(rows[0], { rows: skus.map((sku) => ({ sku, price: eur })) });
  }

  @ResolveField(() => Int)
  imported(@Parent() batch: BatchRow): number {
    return batch.rows?.length ?? 0;
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
  providers: [BatchesResolver],
})
class BatchesModule {}

describe('adversary 104: one toJSON() object shared by 1,001 rows', () => {
  let fixture: PoolApp;

  beforeAll(async () => {
    fixture = await startPoolApp('adv104_gql_shared_tojson', {
      module: BatchesModule,
      max: 6,
      usePool: (started) => (pool = started),
      setup: async (admin) => {
        await admin.query('CREATE TABLE batches (id serial PRIMARY KEY)');
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

  it('control: 1,000 rows sharing the price object replay the same answer', async () => {
    const query = 'mutation { importPrices(count: 1000) { id imported } }';
    const firstAnswer = await post('adv104-tojson-1000', query);
    const again = await post('adv104-tojson-1000', query);
    expect(firstAnswer.body.data.importPrices.imported).toBe(1000);
    expect(again.body.data).toEqual(firstAnswer.body.data);
  });

  it('1,001 rows sharing the price object replay the same answer', async () => {
    const query = 'mutation { importPrices(count: 1001) { id imported } }';
    const firstAnswer = await post('adv104-tojson-1001', query);
    const again = await post('adv104-tojson-1001', query);
    // eslint-disable-next-line no-console
    console.log('TOJSON', firstAnswer.text, again.text);
    expect(firstAnswer.body.data.importPrices.imported).toBe(1001);
    expect(again.body.data).toEqual(firstAnswer.body.data);
  });
});
