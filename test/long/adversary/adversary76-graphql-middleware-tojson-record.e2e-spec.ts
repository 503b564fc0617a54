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
 * Adversary 76: a record (or a `Map`, a `Set`) of `Money` values with a `toJSON()` behind a
 * `[String]` field's middleware is kept as its `toJSON()` strings, never the objects: the first
 * answer formats the amounts, every replay's middleware reads the strings as if they were the
 * objects, `"NaN undefined"` each.
 *
 * The user code (Apollo on Express):
 *
 *   class Money {
 *     constructor(readonly cents: number, readonly currency: string) {}
 *     toJSON() { return `${this.cents} ${this.currency}`; } // for REST bodies
 *   }
 *   const formatPrices: FieldMiddleware = async (_ctx, next) =>
 *     Object.values((await next()) as Record<string, Money>).map((m) => `${(m.cents / 100).toFixed(2)} ${m.currency}`);
 *   @ObjectType() class Quote {
 *     @Field(() => Int) id!: number;
 *     @Field(() => [String], { middleware: [formatPrices] }) prices!: Record<string, Money>; // by currency
 *   }
 *
 * Why: `fitsListType` (lib/graphql/middleware-input.ts) is false for a record, so `walkValue`
 * (lib/graphql/wire-value.ts) keeps it with `keepInput` as it is (`withGetterFields` is not
 * applied: the item type `String` has no fields). `keepData`'s `plainCopy`
 * (lib/graphql/kept-data.ts) writes each `Money` as its `toJSON()`, a string; only a loss is
 * logged. The round-75c fix (`ownDataOf`) covers a single leaf value only.
 *
 * What the docs promise (docs/guides/graphql.md, "What is stored, and replayed"): behind field
 * middleware "a raw value the field's type does not take as it is (a `'pending'` the
 * middleware maps to an enum, a `Money` it writes as a `String`, a jsonb record or a `Map` it
 * maps to a list) is kept as it is, never made a list it is not: an object as its own data,
 * never as its `toJSON()` (a `Money` with a `toJSON()` that a `String` would take is kept as
 * its `cents` and `currency`)"; "a middleware that reads its fields answers the same".
 *
 * Control: the same record of Moneys without `toJSON()`: answered and replayed the same; the
 * quote committed once.
 *
 * Severity: medium (every replay answers wrong data, silently: `"NaN undefined"` where the
 * first answer said `"12.50 EUR"`).
 *
 * Fails now: the replay's `prices` are `["NaN undefined", "NaN undefined"]`.
 *
 * Suggested fix: keep a middleware input's objects as their own data wherever they are in it
 * (a container's values too): in `plainCopy`, under a middleware input, copy an instance's
 * own fields rather than its `toJSON()`.
 *
 * Fixed (round 78): the library no longer reads nor stores a field middleware's input, and
 * never runs the middleware on a replay. The answer commits with the resolver's effects as
 * before (lib/graphql/run-field.ts `settle`), its middleware outputs pending; the operation's
 * answer hook (lib/graphql/replay-marker.ts: Apollo `willSendResponse`, Mercurius
 * `onResolution`) takes each middleware field's output from the answer's data, as the client
 * got it (masked by an outer serializer), and completes the stored answer with one fenced
 * UPDATE (`ClaimStore.completeAnswer`, lib/graphql/output-paths.ts `storeOutputsOf`). On a
 * replay a wrapper on each middleware field of the schema (lib/graphql/middleware-outputs.ts
 * `answerOutputsOf`) answers the stored output for its path, its scalars through
 * `parseValue()`; a replay meeting the outputs pending waits for them, bounded, then answers
 * `field_output_pending`. middleware-input.ts and middleware-extras.ts are gone.
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

/** Nest's field middleware: each price written for the client, `"12.50 EUR"`. */
const formatPrices: FieldMiddleware = async (_ctx, next) => {
  const prices = (await next()) as Record<string, Money>;
  return Object.values(prices).map(
    (money) => `${(money.cents / 100).toFixed(2)} ${money.currency}`,
  );
};

@ObjectType()
class Quote {
  @Field(() => Int)
  id!: number;

  @Field(() => [String], { middleware: [formatPrices] })
  prices!: Record<string, Money>;
}

@Resolver(() => Quote)
class QuotesResolver {
  @Query(() => Int)
  ping(): number {
    return 1;
  }

  @Mutation(() => Quote)
  @Idempotent()
  async createQuote(
    @Args('plain', { type: () => Boolean, defaultValue: false }) plain: boolean,
  ): Promise<Quote> {
    const { rows } = await pool.query<{ id: number }>(
      'INSERT INTO quotes DEFAULT VALUES RETURNING id',
    );
    const make = (cents: number, currency: string) =>
      plain ? (new PlainMoney(cents, currency) as Money) : new Money(cents, currency);
    return { id: rows[0].id, prices: { EUR: make(1250, 'EUR'), USD: make(990, 'USD') } };
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
  providers: [QuotesResolver],
})
class QuotesModule {}

describe('adversary 76: a record of Money with toJSON() behind middleware', () => {
  let fixture: PoolApp;

  beforeAll(async () => {
    fixture = await startPoolApp('adv76_gql_mw_tojson_record', {
      module: QuotesModule,
      max: 6,
      usePool: (started) => (pool = started),
      setup: async (admin) => {
        await admin.query('CREATE TABLE quotes (id serial PRIMARY KEY)');
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

  const replayOf = (first: { body: Record<string, unknown> }) => ({
    ...first.body,
    extensions: { idempotency: { replayed: ['createQuote'] } },
  });

  const count = async () =>
    Number(
      (await fixture.admin.query<{ n: string }>('SELECT count(*) AS n FROM quotes')).rows[0].n,
    );

  const prices = ['12.50 EUR', '9.90 USD'];

  it('control: Moneys without toJSON(), answered and replayed', async () => {
    const query = 'mutation { createQuote(plain: true) { id prices } }';
    const before = await count();
    const first = await post('adv76-mw-tojson-record-c', query);
    expect(first.body).toEqual({ data: { createQuote: { id: expect.any(Number), prices } } });
    const again = await post('adv76-mw-tojson-record-c', query);
    expect(again.body).toEqual(replayOf(first));
    expect(await count()).toBe(before + 1);
  });

  it('a record of Moneys with toJSON(): answered, and replayed the same', async () => {
    const query = 'mutation { createQuote { id prices } }';
    const before = await count();
    const first = await post('adv76-mw-tojson-record-a', query);
    expect(first.body).toEqual({ data: { createQuote: { id: expect.any(Number), prices } } });
    const again = await post('adv76-mw-tojson-record-a', query);
    expect(await count()).toBe(before + 1);
    // Fails: prices ["NaN undefined", "NaN undefined"].
    expect(again.body).toEqual(replayOf(first));
  });
});
