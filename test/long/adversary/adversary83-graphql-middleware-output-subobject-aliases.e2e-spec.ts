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
 * Adversary 83 (graphql): inside a middleware field's output of object type, one object field
 * selected under two aliases, each with its own sub-selection, replays as the first alias's
 * stored object for both: the retry of the very same operation answers `data: null` with
 * `field_not_stored` ("was not selected by the first call ... use a new key for a new
 * operation") at the second alias's field, though the first answer gave it.
 *
 * The app: `createOrder` with `@Idempotent()` (Nest's default non-null type) answers
 * `Order { id profile }`, `profile` behind Nest's field middleware `masked` (a copy of the
 * profile, name in capitals); `Profile { name contact }`, `contact: Contact { phone email }`
 * a plain property. The client sends `profile { name call: contact { phone } mail: contact {
 * email } }` (a form that reads the phone and the mail address as two blocks), and retries
 * the same operation.
 *
 * Why: the stored output holds the answer by response key (`call: { phone }`, `mail: { email
 * }`), but `outputValue` (lib/graphql/middleware-outputs.ts:368-388) rebuilds each object by
 * field name: `selectedFields` merges both aliases' nodes under `contact`, `storedSubkey`
 * (:295, :373) picks one stored key (`call`, the first of the named key), and the item is made
 * from `stored.call` with both aliases' selections, so `email` is not in it and is made
 * `notStoredField`; `value.contact = item` (:388) is then what GraphQL's default resolver
 * gives both `call` and `mail`: `mail.email` throws `field_not_stored`, a non-null field, so
 * the error climbs to the non-null mutation and nulls the whole `data`.
 *
 * Docs (docs/guides/graphql.md, "Field middleware"): "a replay answers that output: the
 * middleware never runs on a replay"; "outputs, and the fields inside an output of object
 * type, are found by their fields' names and arguments first (... one field under two
 * aliases, each with its own selection, each its own output)"; "Send a retry the operation the
 * first call sent".
 *
 * The same under Mercurius with `jit: 1` (the replays compiled): `data: null`,
 * `field_not_stored` at `createOrder.profile.mail.email` (checked by review; the same
 * `outputValue`).
 *
 * Control (passes): one alias of `contact` inside the output, the operation retried.
 *
 * Severity: high (a retry of a committed order answers `data: null`, its id lost, and is told
 * to use a new key: a client that follows the message orders twice).
 *
 * Failed (before the fix): `data: null`, `field_not_stored` at `createOrder.profile.mail.email`.
 *
 * Suggested fix: rebuild an object field selected under several response keys per response
 * key, not per name: where its aliases were stored as different objects, merge the stored
 * objects of all its response keys into the one value GraphQL's default resolver reads (each
 * sub-field from the alias that stored it), or answer each alias through a resolver of its
 * own keyed by `info.path`'s response key, as the two aliases of a middleware field now are.
 *
 * Fixed: `outputValue` (lib/graphql/middleware-outputs.ts) rebuilds each response key of a
 * field from its own stored object with its own selection (`aliasGroups`, where the first call
 * stored that key as the same field) and merges them deeply into the one value GraphQL's
 * default resolver reads (`mergedAnswers`, lib/graphql/merged-aliases.ts, a table of cases in
 * its spec): each alias reads the fields it stored; commit "graphql: one field under two
 * aliases inside a middleware output, each alias from its own stored object".
 */
let pool: Pool;

/** Nest's field middleware: the profile as this caller may see it (a copy, masked). */
const masked: FieldMiddleware = async (_ctx, next) => {
  const value = (await next()) as Profile | null;
  return value === null ? null : { ...value, name: value.name.toUpperCase() };
};

@ObjectType()
class Contact {
  @Field()
  phone!: string;

  @Field()
  email!: string;
}

@ObjectType()
class Profile {
  @Field()
  name!: string;

  @Field(() => Contact)
  contact!: Contact;
}

@ObjectType()
class Order {
  @Field(() => Int)
  id!: number;

  @Field(() => Profile, { middleware: [masked] })
  profile!: Profile;
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
    return {
      id: rows[0].id,
      profile: { name: 'ada', contact: { phone: '+44 20 7946 0000', email: 'ada@example.com' } },
    };
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

describe('adversary 83: one object field under two aliases inside a middleware output', () => {
  let fixture: PoolApp;

  beforeAll(async () => {
    fixture = await startPoolApp('adv83_gql_mw_sub_aliases', {
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

  it('control: one alias of the object inside the output, the operation retried', async () => {
    const query = 'mutation { createOrder { id profile { name contact { phone email } } } }';
    const first = await post('adv83-sub-one', query);
    expect(first.body).toEqual({
      data: {
        createOrder: {
          id: expect.any(Number),
          profile: {
            name: 'ADA',
            contact: { phone: '+44 20 7946 0000', email: 'ada@example.com' },
          },
        },
      },
    });
    const again = await post('adv83-sub-one', query);
    expect(again.body).toEqual({
      ...first.body,
      extensions: { idempotency: { replayed: ['createOrder'] } },
    });
  });

  it('two aliases of one object field, each its own selection: the retry answers the first answer', async () => {
    const query =
      'mutation { createOrder { id profile { name call: contact { phone } mail: contact { email } } } }';
    const first = await post('adv83-sub-two', query);
    expect(first.body).toEqual({
      data: {
        createOrder: {
          id: expect.any(Number),
          profile: {
            name: 'ADA',
            call: { phone: '+44 20 7946 0000' },
            mail: { email: 'ada@example.com' },
          },
        },
      },
    });
    const again = await post('adv83-sub-two', query);
    expect(again.body).toEqual({
      ...first.body,
      extensions: { idempotency: { replayed: ['createOrder'] } },
    });
  });
});
