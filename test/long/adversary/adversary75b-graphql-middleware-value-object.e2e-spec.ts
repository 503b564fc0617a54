import { ApolloDriver, type ApolloDriverConfig } from '@nestjs/apollo';
import { Module } from '@nestjs/common';
import {
  Args,
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
 * Adversary 75b: a Nest field middleware that maps a value object to the field's scalar (a
 * `Money` instance written `"12.50 EUR"`) makes the idempotent mutation fail on every call:
 * its work rolled back, the error stored and replayed to each retry of the key.
 *
 * The app: `Invoice { id total: String }`, `total` a `Money` (`class Money { cents; currency
 * }`) behind Nest's field middleware `formatMoney` (`const m = await next(); return
 * `${(m.cents / 100).toFixed(2)} ${m.currency}``), the mutation `createInvoice(cents)` with
 * `@Idempotent()` and the `Idempotency-Key` header, Apollo on Express. Without
 * `@Idempotent()` it answers `"12.50 EUR"`.
 *
 * Why: round 75 (fdb3ef6) stores a middleware field "as a plain field": walkValue
 * (lib/graphql/wire-value.ts) walks the raw property with the field's type (`String`), whose
 * `serialize()` refuses a `Money`; the catch keeps such a raw value only when
 * `keepsExactly(item)` (kept-data.ts), which an instance of a class is not (superjson gives a
 * plain object back), so the error is thrown again out of `outputWire`: the store fails, the
 * transaction rolls back and the failure is what the key answers from then on. The same
 * `Money` as plain data (a jsonb column's) passes: only the instance fails.
 *
 * Expected (docs/guides/graphql.md, "What is stored, and replayed"): "Field middleware wraps
 * Nest's read of the property, so the field itself is stored as any field is (...; a raw value
 * the field's type refuses, which the middleware maps, kept as it is), and its middleware runs
 * again on a replay on that stored raw property".
 * The general line further on ("A value that cannot be stored at all (..., a value its scalar
 * refuses) is an error, stored as the answer") is about a value GraphQL itself would refuse:
 * here GraphQL never sees the `Money` (the middleware answers a string), and the app works
 * without `@Idempotent()`.
 *
 * Control: the same mutation with `total` as plain data `{ cents, currency }`, and the Money
 * instance without `@Idempotent()`: both answer `"12.50 EUR"`; pass.
 *
 * Severity: high (correct, documented usage refused: the mutation never succeeds, on any try;
 * any value object of a class (without a primitive `valueOf()`) behind a formatting middleware).
 *
 * Fails now: the first answer is `data: null` with the error `String cannot represent value:
 * { cents: 1250, currency: "EUR" }`.
 *
 * Suggested fix: never fail a mutation for a middleware field's raw value: where the type
 * refuses it and it cannot be kept exactly, store it as the walk can (its own data, with its
 * class named as `INSTANCE` does for class-transformer classes), put it in `losses`, or store
 * the middleware's answer (run the field's resolver) rather than its input.
 *
 * Fixed: a middleware field's raw value that its type refuses is kept as its data whatever it
 * is (walkValue's `keepInput`, lib/graphql/wire-value.ts; no `keepsExactly` check): the first
 * answer is the resolver's own `Money`, the replay's middleware reads the stored `{ cents,
 * currency }` (a method of the class is not kept: put in the replay's losses, documented).
 */
let pool: Pool;

/** A value object of the domain: an amount in cents and its currency. */
class Money {
  constructor(
    readonly cents: number,
    readonly currency: string,
  ) {}
}

/** Nest's field middleware: the amount written for the client, `"12.50 EUR"`. */
const formatMoney: FieldMiddleware = async (_ctx, next) => {
  const money = (await next()) as Money;
  return `${(money.cents / 100).toFixed(2)} ${money.currency}`;
};

@ObjectType()
class Invoice {
  @Field(() => Int)
  id!: number;

  @Field(() => String, { middleware: [formatMoney] })
  total!: Money;
}

@Resolver(() => Invoice)
class InvoicesResolver {
  @Query(() => Int)
  ping(): number {
    return 1;
  }

  @Mutation(() => Invoice)
  @Idempotent()
  async createInvoice(
    @Args('cents', { type: () => Int }) cents: number,
    @Args('plain', { type: () => Boolean, defaultValue: false }) plain: boolean,
  ): Promise<Invoice> {
    const { rows } = await pool.query<{ id: number; cents: number; currency: string }>(
      "INSERT INTO invoices (cents, currency) VALUES ($1, 'EUR') RETURNING id, cents, currency",
      [cents],
    );
    const { id, currency } = rows[0];
    // The control: the same amount as plain data (a jsonb column's).
    const total = plain ? ({ cents, currency } as Money) : new Money(cents, currency);
    return { id, total };
  }

  @Mutation(() => Invoice)
  async createInvoiceUnkeyed(@Args('cents', { type: () => Int }) cents: number): Promise<Invoice> {
    const { rows } = await pool.query<{ id: number }>(
      "INSERT INTO invoices (cents, currency) VALUES ($1, 'EUR') RETURNING id",
      [cents],
    );
    return { id: rows[0].id, total: new Money(cents, 'EUR') };
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
  providers: [InvoicesResolver],
})
class InvoicesModule {}

describe('adversary 75b: a field middleware formatting a value object, stored and replayed', () => {
  let fixture: PoolApp;

  beforeAll(async () => {
    fixture = await startPoolApp('adv75b_gql_mw_money', {
      module: InvoicesModule,
      max: 6,
      usePool: (started) => (pool = started),
      setup: async (admin) => {
        await admin.query(
          'CREATE TABLE invoices (id serial PRIMARY KEY, cents int NOT NULL, currency text NOT NULL)',
        );
      },
    });
  }, 60_000);

  afterAll(() => fixture?.close());

  const post = (key: string, query: string) =>
    request(fixture.app.getHttpServer())
      .post('/graphql')
      .set('Content-Type', 'application/json')
      .set('Idempotency-Key', key)
      .timeout(10_000)
      .send(JSON.stringify({ query }));

  const replayOf = (first: { body: Record<string, unknown> }) => ({
    ...first.body,
    extensions: { idempotency: { replayed: ['createInvoice'] } },
  });

  const count = async () =>
    Number((await pool.query<{ n: string }>('SELECT count(*) AS n FROM invoices')).rows[0].n);

  it('control: the amount as plain data, answered and replayed', async () => {
    const query = 'mutation { createInvoice(cents: 1250, plain: true) { id total } }';
    const before = await count();
    const first = await post('adv75b-mw-money-c', query);
    expect(first.body).toEqual({
      data: { createInvoice: { id: expect.any(Number), total: '12.50 EUR' } },
    });
    const again = await post('adv75b-mw-money-c', query);
    expect(again.body).toEqual(replayOf(first));
    expect(await count()).toBe(before + 1);
  });

  it('control: the Money instance without @Idempotent(): answered', async () => {
    const first = await post(
      'adv75b-mw-money-u',
      'mutation { createInvoiceUnkeyed(cents: 1250) { id total } }',
    );
    expect(first.body).toEqual({
      data: { createInvoiceUnkeyed: { id: expect.any(Number), total: '12.50 EUR' } },
    });
  });

  it('the amount a Money instance: answered, and replayed as the first answer', async () => {
    const query = 'mutation { createInvoice(cents: 1250) { id total } }';
    const before = await count();
    const first = await post('adv75b-mw-money-a', query);
    // Fails: data null, "String cannot represent value: { cents: 1250, currency: \"EUR\" }",
    // the invoice rolled back, and that error is what every retry of the key replays.
    expect(first.body).toEqual({
      data: { createInvoice: { id: expect.any(Number), total: '12.50 EUR' } },
    });
    const again = await post('adv75b-mw-money-a', query);
    expect(again.body).toEqual(replayOf(first));
    expect(await count()).toBe(before + 1);
  });
});
