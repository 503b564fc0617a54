import { createHash } from 'node:crypto';
import { ApolloDriver, type ApolloDriverConfig } from '@nestjs/apollo';
import { Module } from '@nestjs/common';
import {
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
 * Fixed (session of 2026-12-06 fourth): an object kept for the app's resolvers keeps the own data property behind each of
 * its selected middleware fields (the middleware's input, never read through a getter) in
 * `PARENT` (lib/graphql/parent-keeping.ts `selectedInputs`, wire-value.ts): the replay's
 * parent holds the raw `email` the resolver reads, and the field still answers the
 * middleware's stored output.
 *
 * Adversary 90 (graphql): the mutation's own value (no middleware above it) has a field behind
 * Nest field middleware (`email`, masked for callers) and a `@ResolveField()` of the same
 * object that reads the raw property (`avatarUrl`, a Gravatar link from the email's hash).
 * When the client selects both, the replay's resolver reads `email` as undefined: the first
 * answer has the avatar of `ada@example.org`, the replay the avatar of `"undefined"`. The same
 * with the global `buildSchemaOptions.fieldMiddleware` (every field then is behind middleware:
 * any selected field a `@ResolveField()` reads is lost).
 *
 * User code:
 *   const mask: FieldMiddleware = async (_ctx, next) => `${String(await next())[0]}***`;
 *   @ObjectType() class Customer { @Field() name; @Field({ middleware: [mask] }) email }
 *   @ResolveField(() => String) avatarUrl(@Parent() c: Customer) {
 *     return `https://gravatar.com/avatar/${md5(c.email)}`;
 *   }
 *   @Mutation(() => Customer) @Idempotent() createCustomer() { INSERT ...; return { name, email } }
 *   query: mutation { createCustomer { avatarUrl email } }
 *
 * Code path: lib/graphql/wire-value.ts `walkObject`: a selected field whose resolution is
 * 'middleware' is skipped (`continue`: its output is stored at the answer,
 * middleware-outputs.ts), and `ownData(source, fields, selected)` keeps the own data of the
 * UNSELECTED fields only: the raw `email` is in neither. The replay's parent has no `email`
 * property the app's resolver reads (the middleware's stored output is the field's answer).
 *
 * Docs (docs/guides/graphql.md): "A replay's resolvers get the same values as the first
 * call's, and the answer is the same bytes"; for a middleware output's parent the library
 * keeps it: "a field behind middleware of its own (the resolver reads the raw email, not the
 * masked one the answer holds), keep the kept value" (adversary 86): the mutation's own value,
 * the commoner place, does not.
 *
 * Severity: high (a replay answers a different value, with no error, on every retry; a masked
 * field and a resolver that reads the raw value is Nest's own field-middleware example shape).
 *
 * Fails now (unskip the it.skip and run this file): the replay's `avatarUrl` is the hash of
 * `"undefined"` (`.../5e543256c480ac577d30f76f9120eb74`), the first answer's that of
 * `ada@example.org`.
 * Control (passes): the same resolver with `email` not selected: the raw email is kept as an
 * unselected field's own data, and the replay answers the first answer.
 *
 * Suggested fix: in `walkObject`, where the object keeps data for the app's resolvers
 * (`resolutions.includes('app')`), keep the own data property of each selected field behind
 * middleware too (the middleware's input, as `kept-member.ts` does for a middleware output's
 * parent), never read through a getter; the replay's field still answers the stored output.
 */
let pool: Pool;

/** Nest's field middleware: the email as callers may see it. */
const mask: FieldMiddleware = async (_ctx, next) => {
  const email = String(await next());
  return `${email[0]}***`;
};

@ObjectType()
class Customer {
  @Field()
  name!: string;

  @Field({ middleware: [mask] })
  email!: string;
}

@Resolver(() => Customer)
class CustomerFields {
  // A read from the parent's raw email, as Gravatar wants it.
  @ResolveField(() => String)
  avatarUrl(@Parent() customer: Customer): string {
    const hash = createHash('md5').update(String(customer.email)).digest('hex');
    return `https://gravatar.com/avatar/${hash}`;
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
    return { name: 'Ada', email: 'ada@example.org' };
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

describe('adversary 90: a @ResolveField() reads the raw input of a selected middleware field', () => {
  let fixture: PoolApp;

  beforeAll(async () => {
    fixture = await startPoolApp('adv90_gql_rf_mw_input', {
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

  const avatar = `https://gravatar.com/avatar/${createHash('md5').update('ada@example.org').digest('hex')}`;

  const replayOf = async (key: string, query: string) => {
    const firstAnswer = await post(key, query);
    expect(firstAnswer.body.errors).toBeUndefined();
    expect(firstAnswer.body.data.createCustomer.avatarUrl).toBe(avatar);
    const again = await post(key, query);
    expect(again.body).toEqual({
      ...firstAnswer.body,
      extensions: { idempotency: { replayed: ['createCustomer'] } },
    });
  };

  it('control: email not selected: the replay answers the first answer', async () => {
    await replayOf('adv90-mw-input-unselected', 'mutation { createCustomer { avatarUrl } }');
  });

  it('email selected (masked): the replay answers the first answer', async () => {
    await replayOf('adv90-mw-input-selected', 'mutation { createCustomer { avatarUrl email } }');
  });
});
