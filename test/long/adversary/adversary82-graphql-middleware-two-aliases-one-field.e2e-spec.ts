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
 * Adversary 82 (graphql): a middleware field of object type selected twice under two aliases,
 * each with its own fields (`a: shipping { street } b: shipping { city }`), makes the retry
 * of that very operation answer `createOrder: null` with `field_not_stored` at
 * `createOrder.b.city` ("was not selected by the first call ... use a new key"): the second
 * alias is answered the first alias's output, which has no `city`.
 *
 * The app: `Order.shipping: Address { street city }` behind Nest's field middleware
 * `visible`; `createOrder` with `@Idempotent()`; Apollo on Express. The client's operation
 * (a page whose header shows the street and whose map shows the city, each under an alias of
 * its own) is sent, its answer lost, and sent again, unchanged.
 *
 * Why: both aliases have the same named key (`shipping`: the field's name, no arguments), and
 * the answer hook keeps one output per named key, the first (`names[name] ??= key`,
 * lib/graphql/output-paths.ts:279: "Two aliases of one field with the same arguments: either
 * is its output"). That holds for a scalar, not for an object output, whose content is what
 * its alias selected. On the replay, `outputAt` (output-paths.ts:454) calls `storedKeyFor`,
 * which looks the named key up first (output-paths.ts:515) and answers `b` with `a`'s output;
 * `city` is not in it (`storedSubkey` finds `b.city` under `b` only), so it is refused.
 *
 * Docs (docs/guides/graphql.md, "Field middleware"): "A retry that selects such a field under
 * another alias ... gets the first call's output of it ... (a retry that gives the first
 * call's aliases to other fields gets each field its own value)"; "Send a retry the operation
 * the first call sent"; and the promise: the answers are the same bytes when the operation
 * is, but for the replay marker.
 *
 * Control (passes): the two aliases with the same selection.
 *
 * Severity: high (the retry of the operation the client sent, unchanged, answers
 * `createOrder: null` and an error telling it to use a new key, for a committed order: a
 * client that follows it orders twice).
 *
 * Fails now: `data: { createOrder: null }` with `field_not_stored` at `createOrder.b.city`.
 *
 * Suggested fix: on a replay, a response key whose own stored output is of the same named key
 * answers its own output first (pass `storedKeyFor` what the first answer knew each key as,
 * `told`, from `names`' keys: the first answer's named key of every output, not only the first
 * alias's); look an output up by named key only where the retry's response key has none, and
 * there prefer the stored alias whose output holds the fields the retry selects.
 *
 * Fixed: the answer hook stores the named key of every output (and field inside one) that
 * `names` does not point to, each alias after the first (`told`, lib/graphql/output-paths.ts
 * `outputsIn`; kept in the stored answer, field-answer.ts); a replay reads each key's named key
 * from both (`toldOf`) and answers a response key its own output where it was the same field
 * (`storedKeyFor`), the named key's first alias only where it has none.
 */
let pool: Pool;

/** Nest's field middleware: the address as the caller may see it (here: as given). */
const visible: FieldMiddleware = async (_ctx, next) => {
  const address = (await next()) as Address;
  return { ...address };
};

@ObjectType()
class Address {
  @Field()
  street!: string;

  @Field()
  city!: string;
}

@ObjectType()
class Order {
  @Field(() => Int)
  id!: number;

  @Field(() => Address, { middleware: [visible] })
  shipping!: Address;
}

@Resolver(() => Order)
class OrdersResolver {
  @Query(() => Int)
  ping(): number {
    return 1;
  }

  @Mutation(() => Order, { nullable: true })
  @Idempotent()
  async createOrder(): Promise<Order> {
    const { rows } = await pool.query<{ id: number }>(
      'INSERT INTO orders DEFAULT VALUES RETURNING id',
    );
    return { id: rows[0].id, shipping: { street: 'Main St 1', city: 'Paris' } };
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

describe('adversary 82: one middleware field under two aliases, each its own selection', () => {
  let fixture: PoolApp;

  beforeAll(async () => {
    fixture = await startPoolApp('adv82_gql_mw_two_aliases', {
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

  const replayed = { idempotency: { replayed: ['createOrder'] } };

  it('control: two aliases with the same selection, the operation retried', async () => {
    const query = 'mutation { createOrder { id a: shipping { street } b: shipping { street } } }';
    const first = await post('adv82-aliases-ok', query);
    expect(first.body).toEqual({
      data: {
        createOrder: {
          id: expect.any(Number),
          a: { street: 'Main St 1' },
          b: { street: 'Main St 1' },
        },
      },
    });
    const again = await post('adv82-aliases-ok', query);
    expect(again.body).toEqual({ ...first.body, extensions: replayed });
  });

  it('two aliases, each its own fields: the retry of the operation answers as it did', async () => {
    const query = 'mutation { createOrder { id a: shipping { street } b: shipping { city } } }';
    const first = await post('adv82-aliases-two', query);
    expect(first.body).toEqual({
      data: {
        createOrder: { id: expect.any(Number), a: { street: 'Main St 1' }, b: { city: 'Paris' } },
      },
    });
    const again = await post('adv82-aliases-two', query);
    // Fails: createOrder null, field_not_stored at createOrder.b.city.
    expect(again.body).toEqual({ ...first.body, extensions: replayed });
  });
});
