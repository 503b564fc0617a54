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
 * Adversary 76: the round-75c fix for a `Money` with a `toJSON()` behind a scalar field's
 * middleware covers one value, not a list of them. A `[String]` field whose middleware formats
 * an array of `Money` answers the first call right, and every replay's middleware reads the
 * `toJSON()` strings as if they were the objects: `"NaN undefined"` each.
 *
 * The user code (Apollo on Express):
 *
 *   class Money {
 *     constructor(readonly cents: number, readonly currency: string) {}
 *     toJSON() { return `${this.cents} ${this.currency}`; } // for REST bodies
 *   }
 *   const formatPrices: FieldMiddleware = async (_ctx, next) =>
 *     ((await next()) as Money[]).map((m) => `${(m.cents / 100).toFixed(2)} ${m.currency}`);
 *   @ObjectType() class Quote {
 *     @Field(() => Int) id!: number;
 *     @Field(() => [String], { middleware: [formatPrices] }) prices!: Money[];
 *   }
 *   @Mutation(() => Quote) @Idempotent() createQuote(...) { insert; return { id, prices: [new Money(1250, 'EUR'), ...] }; }
 *
 * Why: `walkValue` (lib/graphql/wire-value.ts) walks the middleware field's array with the
 * field's list type (`fitsListType` is true for an array); graphql-js' `String.serialize()`
 * takes each `Money` through its `toJSON()`, so the walk succeeds. The 75c branch that keeps an
 * object its scalar writes as its own data (`ownDataOf`) is taken only where the field's
 * nullable type is a leaf, never for a list of leaves; `fromWireAgain` then sees the strings
 * are not the Moneys and `keepsExactly(array of Money)` is false (instances), so only a loss is
 * logged. A replay's middleware `next()` reads the stored strings.
 *
 * What the docs promise (docs/guides/graphql.md, "What is stored, and replayed"): behind field
 * middleware "a raw value the field's type does not take as it is (a `'pending'` the
 * middleware maps to an enum, a `Money` it writes as a `String`, ...) is kept as it is, never
 * made a list it is not: an object as its own data, never as its `toJSON()` (a `Money` with a
 * `toJSON()` that a `String` would take is kept as its `cents` and `currency`)"; "a middleware
 * that reads its fields answers the same".
 *
 * Control: the same list behind the same middleware with Moneys without `toJSON()` (each
 * refused by `String`, so kept whole): answered and replayed the same; the order committed
 * once.
 *
 * Severity: medium (every replay answers wrong data, silently: `"NaN undefined"` where the
 * first answer said `"12.50 EUR"`).
 *
 * Fails now: the replay's `prices` are `["NaN undefined", "NaN undefined"]`.
 *
 * Suggested fix: apply the `ownDataOf` branch to every leaf reached under a middleware input
 * (items of a list of leaves too): keep the input whole whenever the wire form does not give
 * it back exactly, its objects as their own data.
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
  const prices = (await next()) as Money[];
  return prices.map((money) => `${(money.cents / 100).toFixed(2)} ${money.currency}`);
};

@ObjectType()
class Quote {
  @Field(() => Int)
  id!: number;

  @Field(() => [String], { middleware: [formatPrices] })
  prices!: Money[];
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
    const make = (cents: number) =>
      plain ? new PlainMoney(cents, 'EUR') : new Money(cents, 'EUR');
    return { id: rows[0].id, prices: [make(1250), make(990)] as Money[] };
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

describe('adversary 76: a list of Money with toJSON() behind middleware', () => {
  let fixture: PoolApp;

  beforeAll(async () => {
    fixture = await startPoolApp('adv76_gql_mw_tojson_list', {
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

  const prices = ['12.50 EUR', '9.90 EUR'];

  it('control: Moneys without toJSON(), answered and replayed', async () => {
    const query = 'mutation { createQuote(plain: true) { id prices } }';
    const before = await count();
    const first = await post('adv76-mw-tojson-list-c', query);
    expect(first.body).toEqual({ data: { createQuote: { id: expect.any(Number), prices } } });
    const again = await post('adv76-mw-tojson-list-c', query);
    expect(again.body).toEqual(replayOf(first));
    expect(await count()).toBe(before + 1);
  });

  it('Moneys with toJSON(): answered, and replayed the same', async () => {
    const query = 'mutation { createQuote { id prices } }';
    const before = await count();
    const first = await post('adv76-mw-tojson-list-a', query);
    expect(first.body).toEqual({ data: { createQuote: { id: expect.any(Number), prices } } });
    const again = await post('adv76-mw-tojson-list-a', query);
    expect(await count()).toBe(before + 1);
    // Fails: prices ["NaN undefined", "NaN undefined"].
    expect(again.body).toEqual(replayOf(first));
  });
});
