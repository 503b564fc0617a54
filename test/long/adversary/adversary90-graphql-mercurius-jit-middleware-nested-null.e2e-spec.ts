import { jest } from '@jest/globals';
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
import { type MercuriusDriverConfig } from '@nestjs/mercurius';
import { type Pool } from 'pg';
import request from 'supertest';
import { IdempotencyModule, Idempotent } from '../../../lib/index.js';
import { type PoolApp, startPoolApp } from '../../support/pool-app.js';

// Mercurius loads @fastify/static, an ES module jest's CommonJS loader cannot require.
jest.mock('@fastify/static', () => () => undefined);
const { MercuriusDriver } = await import('@nestjs/mercurius');

/**
 * Fixed (session of 2026-12-06 fourth): a stored error under a middleware output, rebuilt as the value of the field it
 * nulled inside that output, is noted for graphql-jit at that field's place with its own path
 * and locations (`ownLocated` from `outputValue`, lib/graphql/middleware-outputs.ts, the
 * operation's context in its `Conversion`): the answer hook puts them back, so the compiled
 * retry's error is at `...contact.email`, located at `email`, as the first answer's.
 *
 * Adversary 90 (graphql): Mercurius with `jit: 1`, a field-middleware output
 * (`Order.customer`) holding an object (`contact`) that GraphQL nulled at the first answer for
 * a missing non-null field under it (`email`, a contact imported without one). The first
 * answer (the document's first run, graphql-js) has the error at
 * `createOrder.customer.contact.email`, located at `email`. The retry of the same document
 * (its second run: compiled by graphql-jit) answers the same data, but the error at
 * `createOrder.customer.contact`, located at `contact`.
 *
 * User code:
 *   const visible: FieldMiddleware = async (_ctx, next) => ({ ...(await next()) });
 *   Contact { @Field() phone; @Field() email }   Customer { @Field() name;
 *   @Field(() => Contact, { nullable: true }) contact }
 *   Order { @Field(() => Customer, { middleware: [visible] }) customer }
 *   @Mutation(() => Order) @Idempotent() createOrder() { INSERT ...; return { id, customer } }
 *   GraphQLModule.forRoot({ driver: MercuriusDriver, autoSchemaFile: true, jit: 1 }) on Fastify
 *
 * Code path: lib/graphql/middleware-outputs.ts `outputValue`: the stored null of `contact` is
 * rebuilt as its error (`fieldErrorAgain` with its own path `...contact.email`, and
 * `markErrorUnder`), the value Nest's reader gives for `contact`. graphql-js keeps a
 * `GraphQLError`'s own path and nodes; graphql-jit wraps what a resolver gives as an Error at
 * the field (`contact`). `ownLocated` / `noteOwnLocated` (lib/graphql/jit-located.ts) put the
 * own path back only for the middleware field's own error (thrown at `customer`), not for one
 * that a field inside its output reads.
 *
 * Docs (docs/guides/graphql.md, "Field middleware"): "a field the first answer gave as null
 * with its error answers that error again where it was, in graphql-js's words ... one under it
 * (a null item of a non-null list type, at the item's path)"; "Under Mercurius' `jit` ... the
 * library's `onResolution` hook gives the replayed field's entry the first answer's
 * `locations` back"; "under Mercurius' `jit` too".
 *
 * Severity: low (data the same; the error's `path` and `locations` differ from the first
 * answer's, so a client that maps errors to fields by path (Apollo Client's error policy, a
 * form that marks the failing input) marks another field on the retry).
 *
 * Fails now (unskip the it.skip and run this file): the replay's error has
 * `path: ["createOrder","customer","contact"]`, `locations: [{ line: 1, column: 52 }]`
 * (first answer: `[..., "contact", "email"]`, column 68).
 * Control (passes): the retry sent as a document of its own (another operation name of the
 * same length: its first run, uncompiled): the first answer again.
 *
 * Suggested fix: note the rebuilt error's own path and locations for graphql-jit wherever a
 * replayed output holds it (the rebuilt value of a field inside the output, as `ownLocated`
 * does for the middleware field's own error), so the answer hook puts them back.
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

  @Mutation(() => Order)
  @Idempotent()
  async createOrder(): Promise<Order> {
    const { rows } = await pool.query<{ id: number }>(
      'INSERT INTO orders DEFAULT VALUES RETURNING id',
    );
    // Imported from an old system: no email on file.
    const contact = { phone: '555', email: null } as unknown as Contact;
    return { id: rows[0].id, customer: { name: 'Ada', contact } };
  }
}

@Module({
  imports: [
    IdempotencyModule.forRootAsync({ useFactory: () => ({ globalKeys: true, pool }) }),
    GraphQLModule.forRoot<MercuriusDriverConfig>({
      driver: MercuriusDriver,
      autoSchemaFile: true,
      graphiql: false,
      jit: 1,
    }),
  ],
  providers: [OrdersResolver],
})
class OrdersModule {}

describe('adversary 90: Mercurius jit, an object inside a middleware output nulled by an error under it', () => {
  let fixture: PoolApp;

  beforeAll(async () => {
    fixture = await startPoolApp('adv90_gql_jit_mw_nested_null', {
      module: OrdersModule,
      max: 6,
      adapter: 'fastify',
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

  const operation = (name: string) =>
    `mutation ${name} { createOrder { id customer { name contact { phone email } } } }`;

  const run = async (key: string, first: string, retry: string) => {
    const firstAnswer = await post(key, operation(first));
    expect(firstAnswer.body.data.createOrder.customer).toEqual({ name: 'Ada', contact: null });
    expect(firstAnswer.body.errors).toMatchObject([
      { path: ['createOrder', 'customer', 'contact', 'email'] },
    ]);
    const again = await post(key, operation(retry));
    expect(again.body).toEqual({
      ...firstAnswer.body,
      extensions: { idempotency: { replayed: ['createOrder'] } },
    });
  };

  it('control: the retry a document of its own (its first run, uncompiled): the first answer', async () => {
    await run('adv90-jit-nested-fresh', 'PlaceA', 'PlaceB');
  });

  it('the retry the same document (compiled, jit: 1): the first answer', async () => {
    await run('adv90-jit-nested-same', 'PlaceC', 'PlaceC');
  });
});
