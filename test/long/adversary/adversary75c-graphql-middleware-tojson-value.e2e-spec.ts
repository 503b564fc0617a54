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
 * Adversary 75c: a field middleware that formats a value object whose class has a `toJSON()`
 * (as value objects written for REST bodies do: `toJSON() { return `${cents} ${currency}` }`)
 * answers the first call right and every replay wrong: the replay's middleware gets the
 * `toJSON()` string, not the object, and reads its fields off a string.
 *
 * The app: `Invoice { id total: String }`, `total` a `Money` instance behind Nest's field
 * middleware `formatMoney` (`const m = await next(); return `${(m.cents / 100).toFixed(2)}
 * ${m.currency}``), `createInvoice(cents)` with `@Idempotent()`, Apollo on Express.
 *
 *   class Money {
 *     constructor(readonly cents: number, readonly currency: string) {}
 *     toJSON() { return `${this.cents} ${this.currency}`; }
 *   }
 *
 * Why: walkValue (lib/graphql/wire-value.ts) keeps a middleware field's input as it is only
 * where the walk with the field's type fails (`keepInput` in the `catch`) or the type is a
 * list the value does not fit (`fitsListType`). graphql-js' `String.serialize()` takes an
 * object with a `toJSON()` (serializeObject), so the walk succeeds: the wire is the toJSON
 * string, `fromWireAgain` sees it is not the Money, and `keepsExactly(item)` is false (an
 * instance), so nothing is kept, only a loss logged. On a replay the middleware's `next()`
 * reads the stored wire `"1250 EUR"`: `m.cents` is undefined, the answer `"NaN undefined"`.
 * (Kept, it would fare no better: kept-data's `plainCopy` writes an object with a `toJSON()`
 * as its JSON, never its fields.)
 *
 * Expected (docs/guides/graphql.md, "What is stored, and replayed"): "the field itself is
 * stored as its middleware's input: ...; a raw value the field's type does not take as it is
 * (a `'pending'` the middleware maps to an enum, a `Money` it writes as a `String`, ...) kept
 * as it is ... An instance of a class in that input comes back as plain data of its own (its
 * fields, not its methods or getters, named in the replay's losses): a middleware that reads
 * its fields answers the same".
 *
 * Control: the same Money class without `toJSON()` (the round 75b fix): first answer and
 * replay both `"12.50 EUR"`; pass.
 *
 * The general line of the same section ("what a class has more (its methods and getters, a
 * `toJSON()` that is written instead, as for a `Decimal`) ... not there as they were on a
 * replay", logged once) covers a value GraphQL reads; the middleware paragraph promises more
 * for a middleware's input, and names this very case (a `Money` written as a `String`).
 *
 * Severity: medium (arguable as the logged limit above; a wrong replay, silently to the client:
 * the first answer says 12.50 EUR, every retry NaN undefined; any value object with a
 * `toJSON()` whose fields a middleware of a scalar field reads).
 *
 * Fails now: the replay's `total` is `"NaN undefined"`, the first answer's `"12.50 EUR"`.
 *
 * Suggested fix: behind middleware never walk the input with the field's type to decide what
 * to keep: keep the input whole (its own data, fields read before any `toJSON()`) whenever
 * the wire form does not give it back exactly (`!back.same`), and in `plainCopy` keep an
 * instance's own fields (not its `toJSON()`) where it is a middleware's input.
 *
 * Fixed: behind middleware, a leaf field's object value that its scalar writes but whose wire form
 * does not give it back (a `Money` with a `toJSON()`) is kept as its own data, a plain object,
 * never its `toJSON()` (walkValue and `ownDataOf`, lib/graphql/wire-value.ts), its class's members
 * named as a loss.
 */
let pool: Pool;

/** A value object of the domain: an amount in cents and its currency. */
class Money {
  constructor(
    readonly cents: number,
    readonly currency: string,
  ) {}

  /** Its JSON for REST bodies: `"1250 EUR"`. */
  toJSON(): string {
    return `${this.cents} ${this.currency}`;
  }
}

/** The same value object without a `toJSON()` (the control). */
class PlainMoney {
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
    // The control: the same amount in a class without a toJSON().
    const total = plain ? (new PlainMoney(cents, currency) as Money) : new Money(cents, currency);
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

describe('adversary 75c: a field middleware formatting a value object with a toJSON(), replayed', () => {
  let fixture: PoolApp;

  beforeAll(async () => {
    fixture = await startPoolApp('adv75c_gql_mw_tojson', {
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

  it('control: the Money class without toJSON(), answered and replayed', async () => {
    const query = 'mutation { createInvoice(cents: 1250, plain: true) { id total } }';
    const before = await count();
    const first = await post('adv75c-mw-tojson-c', query);
    expect(first.body).toEqual({
      data: { createInvoice: { id: expect.any(Number), total: '12.50 EUR' } },
    });
    const again = await post('adv75c-mw-tojson-c', query);
    expect(again.body).toEqual(replayOf(first));
    expect(await count()).toBe(before + 1);
  });

  it('control: the toJSON() Money without @Idempotent(): answered', async () => {
    const first = await post(
      'adv75c-mw-tojson-u',
      'mutation { createInvoiceUnkeyed(cents: 1250) { id total } }',
    );
    expect(first.body).toEqual({
      data: { createInvoiceUnkeyed: { id: expect.any(Number), total: '12.50 EUR' } },
    });
  });

  it('the Money with a toJSON(): replayed as the first answer', async () => {
    const query = 'mutation { createInvoice(cents: 1250) { id total } }';
    const before = await count();
    const first = await post('adv75c-mw-tojson-a', query);
    expect(first.body).toEqual({
      data: { createInvoice: { id: expect.any(Number), total: '12.50 EUR' } },
    });
    const again = await post('adv75c-mw-tojson-a', query);
    // Fails: the replay's total is "NaN undefined" (the middleware read a string's fields).
    expect(again.body).toEqual(replayOf(first));
    expect(await count()).toBe(before + 1);
  });
});
