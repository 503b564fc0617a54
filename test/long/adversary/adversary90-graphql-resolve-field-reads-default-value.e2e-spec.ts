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
 * Fixed (session of 2026-12-06 fourth): a selected field read through its `defaultValue` (the property `undefined`) under
 * an object kept for the app's resolvers keeps the property as `undefined` in `PARENT`
 * (wire-value.ts): the replay's parent holds `nickname: undefined`, the resolver reads it as
 * the first call's did, and Nest's read of the field fills in the default again.
 *
 * Adversary 90 (graphql): a field with `@Field({ defaultValue })` whose property the
 * resolver's value leaves `undefined` (no nickname on file) is read by a `@ResolveField()` of
 * its parent (`greeting`: `Hi` without a nickname). When the client also selects that field,
 * the replay's resolver reads the default (`'n/a'`) where the first call's read `undefined`:
 * the first answer `greeting: "Hi"`, the replay `greeting: "Hi n/a"`.
 *
 * User code:
 *   @ObjectType() class Customer { @Field() name;
 *     @Field({ nullable: true, defaultValue: 'n/a' }) nickname?: string }
 *   @ResolveField(() => String) greeting(@Parent() c: Customer) {
 *     return c.nickname === undefined ? 'Hi' : `Hi ${c.nickname}`;
 *   }
 *   @Mutation(() => Customer) @Idempotent() createCustomer() { INSERT ...; return { name } }
 *   query: mutation { createCustomer { greeting nickname } }
 *
 * Code path: lib/graphql/wire-value.ts `walkObject`: a selected field is read as Nest reads
 * it, `reading.fallback.value` where the property is `undefined`; its wire form is the
 * default, `fromWireAgain` gives the default back (`back.same`), so nothing is kept: the
 * replay's parent holds `nickname: 'n/a'`, the property the app's resolver reads, where the
 * first call's value held nothing. (Not selected, the field's `undefined` own data is kept and
 * the replay answers the first answer: the control.)
 *
 * Docs (docs/guides/graphql.md): "a `@ResolveField()` reads its parent, so each object also
 * keeps ... what the stored fields would not give back: ... and `undefined` ... stay what they
 * are ... A replay's resolvers get the same values as the first call's, and the answer is the
 * same bytes"; "Each field is read as Nest's code-first schema reads it: ... its
 * `@Field({ defaultValue })` where that property is `undefined`".
 *
 * Severity: medium (a replay answers a different value, with no error, on every retry; where
 * a resolver tells a missing value from its default).
 *
 * Fails now (unskip the it.skip and run this file): the replay answers `greeting: "Hi n/a"`
 * (first answer: `"Hi"`).
 * Control (passes): the same resolver with `nickname` not selected: `"Hi"` again.
 *
 * Suggested fix: in `walkObject`, where a selected field was read through its `defaultValue`
 * (the property `undefined`) and the object keeps data for the app's resolvers, keep the
 * property's `undefined` (as for an unselected field), and rebuild the replay's parent with it
 * under a read that answers the default to GraphQL (as the first answer's Nest read does).
 */
let pool: Pool;

@ObjectType()
class Customer {
  @Field()
  name!: string;

  @Field({ nullable: true, defaultValue: 'n/a' })
  nickname?: string;
}

@Resolver(() => Customer)
class CustomerFields {
  @ResolveField(() => String)
  greeting(@Parent() customer: Customer): string {
    return customer.nickname === undefined ? 'Hi' : `Hi ${customer.nickname}`;
  }
}

@Resolver(() => Customer)
class CustomersResolver {
  @Query(() => Int)
  ping(): number {
    return 1;
  }

  @Mutation(() => Customer)
  @Idempotent()
  async createCustomer(): Promise<Customer> {
    await pool.query('INSERT INTO customers DEFAULT VALUES');
    // No nickname on file.
    return { name: 'Ada' };
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
  providers: [CustomersResolver, CustomerFields],
})
class CustomersModule {}

describe('adversary 90: a @ResolveField() reads a field its parent answers through its defaultValue', () => {
  let fixture: PoolApp;

  beforeAll(async () => {
    fixture = await startPoolApp('adv90_gql_rf_default_value', {
      module: CustomersModule,
      max: 6,
      usePool: (started) => (pool = started),
      setup: async (admin) => {
        await admin.query('CREATE TABLE customers (id serial PRIMARY KEY)');
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
    expect(firstAnswer.body.data.createCustomer.greeting).toBe('Hi');
    const again = await post(key, query);
    expect(again.body).toEqual({
      ...firstAnswer.body,
      extensions: { idempotency: { replayed: ['createCustomer'] } },
    });
  };

  it('control: nickname not selected: the replay answers the first answer', async () => {
    await replayOf('adv90-default-unselected', 'mutation { createCustomer { greeting } }');
  });

  it('nickname selected: the replay answers the first answer', async () => {
    await replayOf('adv90-default-selected', 'mutation { createCustomer { greeting nickname } }');
  });
});
