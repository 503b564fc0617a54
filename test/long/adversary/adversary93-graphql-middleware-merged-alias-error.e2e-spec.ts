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
import { type Pool } from 'pg';
import request from 'supertest';
import { IdempotencyModule, Idempotent } from '../../../lib/index.js';
import { type PoolApp, startPoolApp } from '../../support/pool-app.js';

/**
 * Fixed (session of 2026-12-06 fifth): lib/graphql/alias-error-choice.ts picks the
 * candidate whose step comes first in the retry's own selection order, and
 * lib/graphql/alias-errors.ts answers a single response key its chosen error too, rebuilt at
 * its own path (`relocatedError`), on composite property fields (middleware-outputs.ts).
 *
 * Adversary 93 (graphql): inside a field-middleware output, one object field under two
 * aliases, each nulled by an error of its own (`a: contact { phone email }`, a missing
 * non-null `email`; `b: contact { phone age }`, an `age` Int refuses "unknown"). The retry
 * selects the same fields under one alias, `x: contact { phone age email }` (a client whose
 * screen merged the two fragments). The replay answers `x` null, as GraphQL does, but with the
 * email error at `["createOrder","customer","a","email"]`: a path the retry's answer does not
 * have, and another error than GraphQL gives from the same data (the age error at `x.age`:
 * graphql-js completes `x`'s fields in order and stops at the first non-null error).
 *
 * User code: round 90's app (`@Field(() => Customer, { middleware: [visible] }) customer` on
 * Order; `Customer { contact: Contact (nullable) }`; `Contact { phone, email: String!, age:
 * Int! }`; `createOrder` with `@Idempotent()`), Apollo on Express; `createOrderPlain`, the same
 * resolver without `@Idempotent()`, as the control.
 *
 * Code path: lib/graphql/alias-error-choice.ts `aliasErrorChoice`: the first stored candidate
 * whose step the alias selects (`a`'s `email`, before `b`'s `age`), not the first in the
 * retry's selection order; and the chosen error is not rebuilt at the retry's place (its path
 * keeps the first call's alias `a`, where round 90's renamed `x: contact { phone email }` gets
 * `x.email` through `relocatedError` in lib/graphql/middleware-outputs.ts).
 *
 * Docs (docs/guides/graphql.md, "Field middleware"): "two aliases each nulled by its own
 * error, retried under other aliases or with their selections swapped: each of the retry's
 * aliases the error of the fields it selects, at its own path"; alias-error-choice.ts: "each
 * is answered the error whose field under the alias it selects ..., as GraphQL answering it
 * from the same data would".
 *
 * Severity: medium (the data is right; the error is at a path the answer does not have, and
 * names another field than GraphQL would: a client reading errors by path finds none for `x`).
 *
 * Fails now (unskip the it.skip): replay errors `[{ message: "Cannot return null for
 * non-nullable field Contact.email.", path: ["createOrder","customer","a","email"] }]`; the
 * same operation without the library: `[{ message: "Int cannot represent non-integer value:
 * \"unknown\"", path: ["createOrder","customer","x","age"] }]`.
 * Control (passes): the merged operation on `createOrderPlain` answers the age error at x.age.
 *
 * Suggested fix: choose among the candidates by the retry's selection order (the first of the
 * alias's selected fields, walking its sub-selection, that a stored error is at), and always
 * rebuild the chosen error at the retry's own response keys.
 */ let pool: Pool;

/** Nest's field middleware: the customer as the caller may see it (here: as given). */
const visible: FieldMiddleware = async (_ctx, next) => {
  const customer = (await next()) as Customer;
  return { ...customer };
};

@ObjectType()
class Contact {
  @Field()
  phone!: string;

  @Field()
  email!: string;

  @Field(() => Int)
  age!: number;
}

@ObjectType()
class Customer {
  @Field()
  name!: string;

  @Field(() => Contact, { nullable: true })
  contact!: Contact | null;
}

@ObjectType()
class Order {
  @Field(() => Int)
  id!: number;

  @Field(() => Customer, { middleware: [visible] })
  customer!: Customer;
}

@Resolver(() => Order)
class OrdersResolver {
  @Query(() => Int)
  ping(): number {
    return 1;
  }

  // The same mutation without the library: what GraphQL answers from the same data.
  @Mutation(() => Order)
  createOrderPlain(): Promise<Order> {
    return this.createOrder();
  }

  @Mutation(() => Order)
  @Idempotent()
  async createOrder(): Promise<Order> {
    const { rows } = await pool.query<{ id: number }>(
      'INSERT INTO orders DEFAULT VALUES RETURNING id',
    );
    // A contact imported from an old system: no email on file, an age it did not know.
    const contact = { phone: '555', email: null, age: 'unknown' } as unknown as Contact;
    return { id: rows[0].id, customer: { name: 'Ada', contact } };
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
  providers: [OrdersResolver],
})
class OrdersModule {}

describe('adversary 93: two aliases each nulled by its own error, retried merged in one alias', () => {
  let fixture: PoolApp;

  beforeAll(async () => {
    fixture = await startPoolApp('adv93_gql_mw_merged_alias_error', {
      module: OrdersModule,
      max: 6,
      usePool: (started) => (pool = started),
      setup: async (admin) => {
        await admin.query('CREATE TABLE orders (id serial PRIMARY KEY)');
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

  const first =
    'mutation { createOrder { id customer { name a: contact { phone email } b: contact { phone age } } } }';

  const emailError = (alias: string, column: number) => ({
    message: 'Cannot return null for non-nullable field Contact.email.',
    locations: [{ line: 1, column }],
    path: ['createOrder', 'customer', alias, 'email'],
    extensions: { code: 'INTERNAL_SERVER_ERROR' },
  });
  const ageError = (alias: string, column: number) => ({
    message: 'Int cannot represent non-integer value: "unknown"',
    locations: [{ line: 1, column }],
    path: ['createOrder', 'customer', alias, 'age'],
    extensions: { code: 'INTERNAL_SERVER_ERROR' },
  });

  const merged = 'mutation { createOrder { id customer { name x: contact { phone age email } } } }';
  // The same operation on the mutation without the library.
  const mergedPlain = merged.replace('createOrder', 'createOrder: createOrderPlain');
  /** What an error says (its locations are the first answer's on a replay, as documented). */
  const said = (errors: { message: string; path: unknown }[]) =>
    errors.map(({ message, path }) => ({ message, path }));

  it('control: without the library, GraphQL answers the merged alias the age error at x.age', async () => {
    const plain = await post('adv93-merged-plain', mergedPlain);
    expect(said(plain.body.errors)).toEqual([
      { message: ageError('x', 0).message, path: ['createOrder', 'customer', 'x', 'age'] },
    ]);
    expect(plain.body.data.createOrder.customer).toEqual({ name: 'Ada', x: null });
  });

  it('merged alias: the replay answers the error GraphQL answers from the same data', async () => {
    const firstAnswer = await post('adv93-merged', first);
    expect(firstAnswer.body.errors).toEqual([emailError('a', 64), ageError('b', 91)]);
    const plain = await post('adv93-merged-plain2', mergedPlain);
    const again = await post('adv93-merged', merged);
    expect(again.body.data.createOrder.customer).toEqual(plain.body.data.createOrder.customer);
    expect(said(again.body.errors)).toEqual(said(plain.body.errors));
  });
});
