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
 * Adversary 89 (graphql): inside a field-middleware output (`Order.customer`), one object field
 * under two aliases, each with its own selection, each nulled by an error of its own under it:
 * `a: contact { phone email }` null for a missing non-null `email`, `b: contact { phone age }`
 * null for an `age` Int refuses (`"unknown"`, a column imported from an old system). The first
 * answer has two errors, one at `customer.a.email`, one at `customer.b.age`. The replay has the
 * same data but `a`'s error twice (at `a.email`, both times) and `b`'s error is gone.
 *
 * User code: `@Field(() => Customer, { middleware: [visible] }) customer` on Order;
 * `Customer { @Field(() => Contact, { nullable: true }) contact }`; `Contact { phone, email:
 * String!, age: Int! }`; `createOrder` with `@Idempotent()`; Apollo on Express.
 *
 * Code path: lib/graphql/middleware-outputs.ts `outputValue` rebuilds each alias's stored
 * null as its error (`fieldErrorAgain`, marked with `markErrorUnder`), then
 * lib/graphql/merged-aliases.ts `mergedAnswers(first, second)`: two Errors are neither placed
 * (`errorPlaced` wants an object or a list to put an error into) nor merged, and `return
 * first` keeps `a`'s error as the one value GraphQL's default resolver reads for both aliases:
 * `b` throws `a`'s error, and graphql-js locates it at `a`'s place again (its path is set).
 *
 * Docs (docs/guides/graphql.md, "Field middleware"): "a field the first answer gave as null
 * with its error answers that error again where it was ... one alias nulled by an error under
 * it ... the error where its alias reads it"; replays answer the first answer.
 *
 * Severity: medium: the replay's data is the same, but its errors are not: `b`'s error (the
 * real reason `b` is null) is lost, and `a`'s is reported twice, so a client that reads the
 * errors to tell what failed is misled.
 *
 * Fails now (unskip the it.skip and run this file): the replay's second error is
 * `Cannot return null for non-nullable field Contact.email.` at `createOrder.customer.a.email`
 * (first answer: `Int cannot represent non-integer value: "unknown"` at
 * `createOrder.customer.b.age`).
 * Control (passes): only `a` nulled, `b: contact { phone }` answered (adversary 86's case).
 *
 * Suggested fix: in `mergedAnswers`, where both aliases' rebuilt values are errors (or an
 * error and a null), keep each alias's own: e.g. rebuild the value as an object whose fields
 * are each alias's failing step, each holding its own error (`email` -> a's, `age` -> b's),
 * so each alias reads its own error where it was, as `errorPlaced` does for one.
 *
 * Fixed (session of 2026-12-06, third): where the aliases' rebuilt values are two errors,
 * `outputValue` (lib/graphql/middleware-outputs.ts) gives the field a read of the library's
 * that answers each response key its own error (lib/graphql/alias-errors.ts `aliasErrorsRead`);
 * a wrapper on object-valued property fields (`answerAliasReadsOf`, as Nest's reader never
 * calls a function it reads) reads it with the field's `info`.
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

describe('adversary 89: two aliases of one field inside a middleware output, each nulled by its own error', () => {
  let fixture: PoolApp;

  beforeAll(async () => {
    fixture = await startPoolApp('adv89_gql_mw_two_errors', {
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

  const replayOf = async (key: string, query: string, errors: number) => {
    const firstAnswer = await post(key, query);
    expect(firstAnswer.body.errors ?? []).toHaveLength(errors);
    const again = await post(key, query);
    expect(again.body).toEqual({
      ...firstAnswer.body,
      extensions: { idempotency: { replayed: ['createOrder'] } },
    });
  };

  it('control: one alias nulled by its error, the other answered: the replay is the first answer', async () => {
    await replayOf(
      'adv89-one-error',
      'mutation { createOrder { id customer { name a: contact { phone email } b: contact { phone } } } }',
      1,
    );
  });

  it('each alias nulled by an error of its own: the replay is the first answer', async () => {
    await replayOf(
      'adv89-two-errors',
      'mutation { createOrder { id customer { name a: contact { phone email } b: contact { phone age } } } }',
      2,
    );
  });
});
