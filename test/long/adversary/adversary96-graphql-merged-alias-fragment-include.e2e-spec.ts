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
 * Fixed (session of 2026-12-06 fifth): lib/graphql/selection.ts `subfieldKeys` (moved from
 * middleware-outputs.ts) lists an alias's sub-fields through `collectedNodes`, graphql-js's
 * `collectFields` order: fragments and inline fragments inlined in place by type condition,
 * `@skip`/`@include` read with the retry's variables (its `info`); `selectedFields` uses the
 * same collector.
 *
 * Adversary 96 (graphql): round 93's merged alias, retried as a real client writes it. The
 * first call nulls two aliases of one middleware-output field by errors of their own (`a:
 * contact { phone email }`, a missing non-null `email`; `b: contact { phone age }`, an `age`
 * Int refuses "unknown"). The retry merges them under one alias `x`, but (1) with `age` in an
 * inline fragment (`x: contact { phone ... on Contact { age } email }`, a fragment of the
 * client's screen), or (2) with `age` turned off by a variable-driven directive (`x: contact {
 * phone age @include(if: false) email }`). GraphQL answers (1) the age error at `x.age` (it
 * collects the fragment's fields in place: phone, age, email) and (2) the email error at
 * `x.email` (age is not selected). The replay answers (1) the email error and (2) the age
 * error: the error of a field GraphQL does not even select.
 *
 * User code: round 93's app (`@Field(() => Customer, { middleware: [visible] }) customer` on
 * Order; `Customer { contact: Contact (nullable) }`; `Contact { phone, email: String!, age:
 * Int! }`; `createOrder` with `@Idempotent()`), Apollo on Express; `createOrderPlain`, the same
 * resolver without `@Idempotent()`, as the control.
 *
 * Code path: lib/graphql/middleware-outputs.ts `subfieldKeys(node)`: the alias's sub-fields
 * are its direct `Field` selections only; an `InlineFragment` / `FragmentSpread` is skipped
 * (its fields never counted, so a later field wins), and `@include` / `@skip` are not read (a
 * skipped field counted first). lib/graphql/alias-error-choice.ts `aliasErrorChoice` then
 * picks by that list.
 *
 * Docs (docs/guides/graphql.md, "Field middleware"): "two aliases each nulled by its own
 * error, retried under other aliases or with their selections swapped: each of the retry's
 * aliases the error of the fields it selects, at its own path"; alias-error-choice.ts: "the
 * first in its own selection's order: graphql-js completes an object's fields in order and
 * stops at the first non-null error".
 *
 * Severity: medium (the data is right, null; the error names another field and path than
 * GraphQL gives from the same data: in (2) a field the retry does not select).
 *
 * Fails now (unskip the it.skips): (1) replay errors `[{ message: "Cannot return null for
 * non-nullable field Contact.email.", path: [..., "x", "email"] }]`, GraphQL's `[{ message:
 * "Int cannot represent non-integer value: \"unknown\"", path: [..., "x", "age"] }]`; (2)
 * replay `[{ message: "Int cannot represent ...", path: [..., "x", "age"] }]`, GraphQL's `[{
 * message: "Cannot return null for non-nullable field Contact.email.", path: [..., "x",
 * "email"] }]`.
 * Control (passes): the same operations on `createOrderPlain`, and round 93's plain merge
 * replayed as GraphQL answers it.
 *
 * Suggested fix: list the alias's sub-fields as GraphQL collects them (graphql-js
 * `collectFields` semantics: fragments inlined in place, type conditions, `@skip`/`@include`
 * with the retry's variables), e.g. from the retry's `info` (its `fieldNodes` and variables)
 * rather than the bare AST node.
 */
let pool: Pool;

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

describe('adversary 96: merged alias retried with a fragment or an @include', () => {
  let fixture: PoolApp;

  beforeAll(async () => {
    fixture = await startPoolApp('adv96_gql_merged_alias_frag', {
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

  const fragment =
    'mutation { createOrder { id customer { name x: contact { phone ... on Contact { age } email } } } }';
  const included =
    'mutation { createOrder { id customer { name x: contact { phone age @include(if: false) email } } } }';
  const plainOf = (query: string) => query.replace('createOrder', 'createOrder: createOrderPlain');
  /** What an error says (its locations are the first answer's on a replay, as documented). */
  const said = (errors: { message: string; path: unknown }[]) =>
    errors.map(({ message, path }) => ({ message, path }));

  it('control: without the library, GraphQL answers the fragment merge x.age, the @include merge x.email', async () => {
    const frag = await post('adv96-frag-plain', plainOf(fragment));
    expect(said(frag.body.errors)).toEqual([
      { message: ageError('x', 0).message, path: ['createOrder', 'customer', 'x', 'age'] },
    ]);
    expect(frag.body.data.createOrder.customer).toEqual({ name: 'Ada', x: null });
    const incl = await post('adv96-incl-plain', plainOf(included));
    expect(said(incl.body.errors)).toEqual([
      { message: emailError('x', 0).message, path: ['createOrder', 'customer', 'x', 'email'] },
    ]);
    expect(incl.body.data.createOrder.customer).toEqual({ name: 'Ada', x: null });
  });

  it('control: the plain merge (round 93) replays the error GraphQL answers', async () => {
    const firstAnswer = await post('adv96-merged', first);
    expect(firstAnswer.body.errors).toEqual([emailError('a', 64), ageError('b', 91)]);
    const merged =
      'mutation { createOrder { id customer { name x: contact { phone age email } } } }';
    const plain = await post('adv96-merged-plain', plainOf(merged));
    const again = await post('adv96-merged', merged);
    expect(again.body.data.createOrder.customer).toEqual(plain.body.data.createOrder.customer);
    expect(said(again.body.errors)).toEqual(said(plain.body.errors));
  });

  it('merged with an inline fragment: the replay answers the error GraphQL answers', async () => {
    const firstAnswer = await post('adv96-frag', first);
    expect(firstAnswer.body.errors).toEqual([emailError('a', 64), ageError('b', 91)]);
    const plain = await post('adv96-frag-plain2', plainOf(fragment));
    const again = await post('adv96-frag', fragment);
    expect(again.body.data.createOrder.customer).toEqual(plain.body.data.createOrder.customer);
    expect(said(again.body.errors)).toEqual(said(plain.body.errors));
  });

  it('merged with @include(if: false) on age: the replay answers the error GraphQL answers', async () => {
    const firstAnswer = await post('adv96-incl', first);
    expect(firstAnswer.body.errors).toEqual([emailError('a', 64), ageError('b', 91)]);
    const plain = await post('adv96-incl-plain2', plainOf(included));
    const again = await post('adv96-incl', included);
    expect(again.body.data.createOrder.customer).toEqual(plain.body.data.createOrder.customer);
    expect(said(again.body.errors)).toEqual(said(plain.body.errors));
  });
});
