import { ApolloDriver, type ApolloDriverConfig } from '@nestjs/apollo';
import { ClassSerializerInterceptor, Module } from '@nestjs/common';
import { APP_INTERCEPTOR, Reflector } from '@nestjs/core';
import {
  Args,
  Field,
  GraphQLModule,
  Int,
  Mutation,
  ObjectType,
  Query,
  Resolver,
} from '@nestjs/graphql';
import { Expose } from 'class-transformer';
import { type Pool } from 'pg';
import request from 'supertest';
import { IdempotencyModule, Idempotent } from '../../../lib/index.js';
import { type PoolApp, startPoolApp } from '../../support/pool-app.js';

/**
 * Adversary, round 44b: a mutation's value rebuilt as an instance of its class on a replay
 * (round 43's fix) is a half-built instance: its class's getters run on it and throw, so every
 * replay of an answered mutation fails where the first call answered.
 *
 * The app (Apollo on Express, the pool seam): Nest's serialization recipe, a global
 * `ClassSerializerInterceptor` with its default strategy (the interceptor round 43 fixed the
 * library for). The GraphQL type is the app's domain class, used by its REST routes too, so
 * its getters carry `@Expose()` (class-transformer's documented way to put a getter in the
 * serialized output):
 *
 *   @ObjectType() class Order {
 *     @Field(() => Int) id; @Field(() => [String]) lines;
 *     @Field(() => Int) @Expose() get lineCount() { return this.lines.length; }
 *   }
 *   @ObjectType() class Card {            // an ES private field, as modern TS code writes it
 *     #pan: string;
 *     @Field(() => Int) id;
 *     @Field() @Expose() get last4() { return this.#pan.slice(-4); }
 *   }
 *
 * The client selects `{ id }` (it needs no more).
 *
 * What happens: at the first call the resolver's `Order`/`Card` is whole, the serializer reads
 * the getter (3 / "4242") and GraphQL answers `{ id }`. The library stored only the selection
 * (`outputWire`, lib/graphql/wire-value.ts:194-214: unselected fields are neither read nor
 * stored) and marked the value as an instance of its Nest class (wire-value.ts:284-285,
 * `INSTANCE`). A replay makes it one again with `Object.create(prototype)`, the constructor not
 * run, only the stored fields its own (`emptyOfNestType`, lib/graphql/nest-fields.ts:83-88;
 * `fromWire`, wire-value.ts:460-462): `lines` is not there, and the object has no `#pan` slot.
 * The class's getters are its prototype's again ("its methods and getters are its class's
 * again", docs/guides/graphql.md), and the serializer outside `@Idempotent()` reads every
 * `@Expose()`d one: `this.lines.length` throws "Cannot read properties of undefined", and
 * `this.#pan` throws "Cannot read private member #pan from an object whose class did not
 * declare it" (no defensive `?.` in the app can avoid that one). The mutation answers
 * `data: null` with an INTERNAL_SERVER_ERROR on every retry, for a mutation that committed;
 * nothing is logged as a replay loss (a rebuilt instance reports none, wire-value.ts:286).
 * Before round 43 the replay was a plain object, which the serializer copies as it is.
 *
 * Expected: the replay is the first answer (`{ id }`, with the replay marker), one row.
 *
 * Control: the same mutations with a selection that includes the getter's field (`{ id
 * lineCount }`, `{ id last4 }`): the stored field is the rebuilt instance's own property and
 * hides the getter, and the replay is the first answer. Passes.
 *
 * Severity: critical (a mutation that committed answers an error on every retry: its stored
 * answer is lost to the client; a retry of a lost response cannot learn that it succeeded).
 */
let pool: Pool;

@ObjectType()
class Order {
  @Field(() => Int)
  id!: number;

  @Field(() => [String])
  lines!: string[];

  @Field(() => Int)
  @Expose()
  get lineCount(): number {
    return this.lines.length;
  }

  constructor(id: number, lines: string[]) {
    this.id = id;
    this.lines = lines;
  }
}

@ObjectType()
class Card {
  readonly #pan: string;

  @Field(() => Int)
  id!: number;

  @Field()
  @Expose()
  get last4(): string {
    return this.#pan.slice(-4);
  }

  constructor(id: number, pan: string) {
    this.id = id;
    this.#pan = pan;
  }
}

@Resolver()
class ShopResolver {
  @Query(() => Int)
  ping(): number {
    return 1;
  }

  @Mutation(() => Order)
  @Idempotent()
  async placeOrder(@Args('ref') ref: string): Promise<Order> {
    const { rows } = await pool.query<{ id: number }>(
      'INSERT INTO effects (ref) VALUES ($1) RETURNING id',
      [ref],
    );
    return new Order(rows[0].id, ['apple', 'pear', 'plum']);
  }

  @Mutation(() => Card)
  @Idempotent()
  async issueCard(@Args('ref') ref: string): Promise<Card> {
    const { rows } = await pool.query<{ id: number }>(
      'INSERT INTO effects (ref) VALUES ($1) RETURNING id',
      [ref],
    );
    return new Card(rows[0].id, '4000123412344242');
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
  providers: [
    ShopResolver,
    {
      provide: APP_INTERCEPTOR,
      inject: [Reflector],
      useFactory: (reflector: Reflector) => new ClassSerializerInterceptor(reflector),
    },
  ],
})
class ShopModule {}

describe('adversary 44b: a rebuilt instance whose getters read what was not stored', () => {
  let fixture: PoolApp;

  beforeAll(async () => {
    fixture = await startPoolApp('adv44b_rebuilt_getter', {
      module: ShopModule,
      max: 4,
      usePool: (started) => (pool = started),
      setup: async (admin) => {
        await admin.query('CREATE TABLE effects (id serial PRIMARY KEY, ref text NOT NULL)');
      },
    });
  }, 60_000);

  afterAll(() => fixture?.close());

  const send = (key: string, query: string) =>
    request(fixture.app.getHttpServer())
      .post('/graphql')
      .set('Idempotency-Key', key)
      .timeout(5_000)
      .send({ query });
  const effects = async (ref: string) =>
    Number(
      (await fixture.admin.query('SELECT count(*) FROM effects WHERE ref = $1', [ref])).rows[0]
        .count,
    );
  const replayedAs = (first: { body: object }, field: string) => ({
    ...first.body,
    extensions: { idempotency: { replayed: [field] } },
  });

  it('control: the getter field selected, so stored: the replay is the first answer', async () => {
    const order = await send(
      'ctl-order',
      'mutation { placeOrder(ref: "ctl-order") { id lineCount } }',
    );
    const orderAgain = await send(
      'ctl-order',
      'mutation { placeOrder(ref: "ctl-order") { id lineCount } }',
    );
    expect(order.body).toEqual({ data: { placeOrder: { id: expect.any(Number), lineCount: 3 } } });
    expect(orderAgain.body).toEqual(replayedAs(order, 'placeOrder'));
    const card = await send('ctl-card', 'mutation { issueCard(ref: "ctl-card") { id last4 } }');
    const cardAgain = await send(
      'ctl-card',
      'mutation { issueCard(ref: "ctl-card") { id last4 } }',
    );
    expect(card.body).toEqual({ data: { issueCard: { id: expect.any(Number), last4: '4242' } } });
    expect(cardAgain.body).toEqual(replayedAs(card, 'issueCard'));
    expect(await effects('ctl-order')).toBe(1);
    expect(await effects('ctl-card')).toBe(1);
  });

  it('a getter reading an unselected field: the replay is the first answer', async () => {
    const query = 'mutation { placeOrder(ref: "order") { id } }';
    const first = await send('order', query);
    const replay = await send('order', query);
    expect(first.body).toEqual({ data: { placeOrder: { id: expect.any(Number) } } });
    expect(replay.body).toEqual(replayedAs(first, 'placeOrder'));
    expect(await effects('order')).toBe(1);
  });

  it('a getter reading an ES private field: the replay is the first answer', async () => {
    const query = 'mutation { issueCard(ref: "card") { id } }';
    const first = await send('card', query);
    const replay = await send('card', query);
    expect(first.body).toEqual({ data: { issueCard: { id: expect.any(Number) } } });
    expect(replay.body).toEqual(replayedAs(first, 'issueCard'));
    expect(await effects('card')).toBe(1);
  });
});
