import { ApolloDriver, type ApolloDriverConfig } from '@nestjs/apollo';
import { Module } from '@nestjs/common';
import {
  Field,
  type FieldMiddleware,
  GraphQLModule,
  Int,
  Mutation,
  ObjectType,
  Query,
  Resolver,
} from '@nestjs/graphql';
import { GraphQLScalarType } from 'graphql';
import { type Pool } from 'pg';
import request from 'supertest';
import { IdempotencyModule, Idempotent } from '../../../lib/index.js';
import { type PoolApp, startPoolApp } from '../../support/pool-app.js';

/**
 * Fixed (session of 2026-12-06 fourth): a stored output's leaf is rebuilt through its scalar's `parseValue()` only where
 * `serialize()` writes that as the stored form again; else the stored form itself where it is
 * written as it is (lib/graphql/leaf-again.ts, used by `outputValue` in
 * lib/graphql/middleware-outputs.ts): the replay writes `"+1 (555) 010-9999"` again.
 *
 * Adversary 90 (graphql): a custom scalar that normalizes what clients send
 * (`PhoneNumber`: `parseValue()` keeps the digits and the `+`, as an input should be stored)
 * and writes a stored value as it is (`serialize()`: the number as the customer typed it).
 * Behind field middleware, a replay answers the NORMALIZED form: the first answer
 * `"+1 (555) 010-9999"`, the replay `"+15550109999"`. The same field without middleware (the
 * mutation's own value) replays as it was first answered.
 *
 * User code:
 *   const PhoneNumber = new GraphQLScalarType({ name: 'PhoneNumber',
 *     serialize: (v) => String(v), parseValue: (v) => String(v).replace(/[^+\d]/g, '') });
 *   @ObjectType() class Contact { @Field(() => PhoneNumber) phone }
 *   @ObjectType() class Customer { @Field(() => Contact, { middleware: [audit] }) contact;
 *     @Field(() => Contact) billing }
 *   @Mutation(() => Customer) @Idempotent() createCustomer() { INSERT ...; return {...} }
 *
 * Code path: lib/graphql/middleware-outputs.ts `outputValue`: a leaf of a stored output is
 * rebuilt as `type.parseValue(wire)`, and GraphQL writes that with `serialize()`: the same
 * bytes only where `serialize(parseValue(wire))` is `wire`. The mutation's own value
 * (lib/graphql/wire-value.ts `fromWireAgain`) checks it and keeps the raw value where it is not
 * (the control); the outputs do not.
 *
 * Docs (docs/guides/graphql.md, "Field middleware"): "Each output comes back on a replay with
 * its scalars through their `parseValue()` (the same bytes)"; "A replay's resolvers get the
 * same values as the first call's, and the answer is the same bytes".
 *
 * Severity: medium (a replay answers a different value, with no error, on every retry;
 * scalars that normalize input are common: phone numbers, emails lowercased, currency codes
 * uppercased, trimmed strings).
 *
 * Fails now (unskip the it.skip and run this file): the replay's `contact.phone` is
 * `"+15550109999"` (first answer: `"+1 (555) 010-9999"`).
 * Control (passes): `billing { phone }`, the same type without middleware.
 *
 * Suggested fix: in `outputValue`, for a leaf, take `parseValue(wire)` only where its
 * `serialize()` writes `wire` again (as `fromWireAgain` checks); else answer the wire form
 * itself where `serialize(wire)` is `wire`, or keep the middleware's raw leaf at the answer
 * (typed JSON, as `__kept` does) for the replay.
 */
let pool: Pool;

/** Normalizes what clients send; writes what is stored as it is. */
const PhoneNumber = new GraphQLScalarType({
  name: 'PhoneNumber',
  serialize: (value) => String(value),
  parseValue: (value) => String(value).replace(/[^+\d]/g, ''),
});

/** Nest's field middleware: an audit that passes the value on. */
const audit: FieldMiddleware = async (_ctx, next) => next();

@ObjectType()
class Contact {
  @Field(() => PhoneNumber)
  phone!: string;
}

@ObjectType()
class Customer {
  @Field(() => Int)
  id!: number;

  @Field(() => Contact, { middleware: [audit] })
  contact!: Contact;

  @Field(() => Contact)
  billing!: Contact;
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
    const { rows } = await pool.query<{ id: number }>(
      'INSERT INTO customers DEFAULT VALUES RETURNING id',
    );
    // As the customer typed it.
    const phone = '+1 (555) 010-9999';
    return { id: rows[0].id, contact: { phone }, billing: { phone } };
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
  providers: [CustomersResolver],
})
class CustomersModule {}

describe('adversary 90: a scalar that normalizes its input, inside a middleware output', () => {
  let fixture: PoolApp;

  beforeAll(async () => {
    fixture = await startPoolApp('adv90_gql_mw_scalar_input', {
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

  const replayOf = async (key: string, field: 'contact' | 'billing') => {
    const query = `mutation { createCustomer { id ${field} { phone } } }`;
    const firstAnswer = await post(key, query);
    expect(firstAnswer.body.errors).toBeUndefined();
    expect(firstAnswer.body.data.createCustomer[field]).toEqual({ phone: '+1 (555) 010-9999' });
    const again = await post(key, query);
    expect(again.body).toEqual({
      ...firstAnswer.body,
      extensions: { idempotency: { replayed: ['createCustomer'] } },
    });
  };

  it('control: billing, no middleware: the replay answers the first answer', async () => {
    await replayOf('adv90-scalar-billing', 'billing');
  });

  it('contact, behind middleware: the replay answers the first answer', async () => {
    await replayOf('adv90-scalar-contact', 'contact');
  });
});
