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
 * Adversary 84 (graphql): an operation whose whole `data` another root field's error nulled
 * (a non-null mutation after the idempotent one that throws), where a nullable field inside a
 * middleware output failed on its own (a signed URL whose signing service is down: GraphQL
 * answers that field null with its error, the output completed around it), stores the whole
 * output as null with that error: the retry answers `createOrder: null` (the output is
 * non-null, so the null reaches the mutation's field), the committed order's id and name lost,
 * where GraphQL completed `profile { name: "ADA", avatarUrl: null }` and the normal road's
 * replay answers just that.
 *
 * User code: `Profile { name; avatarUrl (nullable) }` behind Nest field middleware `masked`
 * (a copy, name in capitals, `avatarUrl` a Promise of the signed URL, which rejects while the
 * signer is down); `notify: Boolean!`, a non-idempotent mutation after the idempotent
 * `createOrder`, failing at the first call. The client retries the same operation.
 *
 * Code path: lib/graphql/output-paths.ts `outputsIn`: with `data` null, `dataAt` gives
 * `undefined` for the output, and `located.some((each) => isAtOrUnder(each.key, key))` (an
 * error at `profile.avatarUrl`, under the output) stores `outputs[key] = null` before the
 * `remade` output (completed-output.ts, which gives up on a rejected Promise) is looked at:
 * an error that nulled only a field inside the output is taken for one that nulled the output.
 * The replay (`outputValue`, middleware-outputs.ts) answers the output's field with that error
 * at `avatarUrl`, and the non-null `profile` nulls `createOrder`.
 *
 * Docs (docs/guides/graphql.md, "Field middleware"): "An operation whose whole `data` another
 * root field's error nulled (...) still stores each output, as GraphQL completed it from the
 * middleware's result: (...) a Promise under it awaited"; "a field the first answer gave as
 * null with its error answers that error again where it was"; "Where it cannot be made so
 * (...), a replay answers that field `field_output_pending`".
 *
 * Severity: high: the retry of a committed order answers `createOrder: null` (its id lost),
 * with only the avatar's error to go by, where GraphQL had the order; a different answer from
 * the normal road's replay of the same first call.
 *
 * Fails now: the retry answers `data: { createOrder: null, notify: true }` with the signing
 * error at `createOrder.profile.avatarUrl`; the control (notify up at the first call) replays
 * `createOrder: { id, profile: { name: "ADA", avatarUrl: null } }` with that error.
 *
 * Suggested fix: in `outputsIn`, an error under (not at) an output whose place is gone with the
 * whole `data` nulled does not make the output null: make it again (`completedOutput`, with a
 * rejected Promise under it answered null there and its error kept at its key, as GraphQL
 * completed it), or mark it `lost` (`field_output_pending`) rather than null.
 *
 * Fixed: `completedOutput` (lib/graphql/completed-output.ts) makes a failure inside the output
 * (a rejected Promise, a throwing getter, a scalar that cannot be serialized) null at the
 * nearest nullable place, as GraphQL does, noting the error's key (`errorsAt`); the answer hook
 * keeps that remade output only where the answer has an error at each such key
 * (`remadeOutputs`, lib/graphql/output-paths.ts), and `outputsIn` prefers it to a whole-output
 * null for an error strictly under the output (an error at the output itself, or one that
 * reached it, still stores null). (commit: fix84gql2 "root-nulled outputs: a failure inside
 * made null where GraphQL nulled it")
 */
let pool: Pool;
let notifyFails = true;

/** Nest's field middleware: the profile as this caller may see it, its name in capitals. */
const masked: FieldMiddleware = async (_ctx, next) => {
  const value = (await next()) as { name: string } | null;
  return value === null
    ? null
    : { ...value, name: value.name.toUpperCase(), avatarUrl: signedUrl(value.name) };
};

let signerDown = true;

/** A signed URL of the avatar: a call to a signing service, down at the first call. */
async function signedUrl(name: string): Promise<string> {
  await new Promise((resolve) => setTimeout(resolve, 5));
  if (signerDown) throw new Error('signing service unavailable');
  return `https://cdn.example/${name}.png?sig=abc`;
}

@ObjectType()
class Profile {
  @Field()
  name!: string;

  @Field({ nullable: true })
  avatarUrl?: string;
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

  @Mutation(() => Order, { nullable: true })
  @Idempotent()
  async createOrder(): Promise<Order> {
    const { rows } = await pool.query<{ id: number }>(
      'INSERT INTO orders DEFAULT VALUES RETURNING id',
    );
    return { id: rows[0].id, profile: { name: 'ada' } };
  }

  /** Not idempotent, and non-null: a mail service that is down at the first call. */
  @Mutation(() => Boolean)
  notify(): boolean {
    if (notifyFails) throw new Error('mail service unavailable');
    return true;
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

describe('adversary 84: a middleware output with a failed nullable field inside, its whole data nulled by another root field', () => {
  let fixture: PoolApp;

  beforeAll(async () => {
    fixture = await startPoolApp('adv84_gql_mw_root_inner_err', {
      module: OrdersModule,
      max: 6,
      usePool: (started) => (pool = started),
      setup: async (admin) => {
        await admin.query('CREATE TABLE orders (id serial PRIMARY KEY)');
      },
    });
  }, 60_000);

  afterAll(() => fixture?.close());

  const QUERY = 'mutation { createOrder { id profile { name avatarUrl } } notify }';

  const post = (key: string) =>
    request(fixture.app.getHttpServer())
      .post('/graphql')
      .set('Content-Type', 'application/json')
      .set('Idempotency-Key', key)
      .timeout(20_000)
      .send(JSON.stringify({ query: QUERY }));

  const expected = async () => {
    const { rows } = await pool.query<{ id: number }>('SELECT max(id) AS id FROM orders');
    return {
      data: {
        createOrder: { id: rows[0].id, profile: { name: 'ADA', avatarUrl: null } },
        notify: true,
      },
      errors: [
        expect.objectContaining({
          message: 'signing service unavailable',
          path: ['createOrder', 'profile', 'avatarUrl'],
        }),
      ],
      extensions: { idempotency: { replayed: ['createOrder'] } },
    };
  };

  it('control: notify up at the first call, the replay answers the order, its avatar error again', async () => {
    signerDown = true;
    notifyFails = false;
    const first = await post('adv84-inner-err-up');
    expect(first.body.data.createOrder.profile).toEqual({ name: 'ADA', avatarUrl: null });
    signerDown = false;
    const again = await post('adv84-inner-err-up');
    expect(again.body).toEqual(await expected());
  });

  it('notify down at the first call: the retry answers the order, its avatar error again', async () => {
    signerDown = true;
    notifyFails = true;
    const first = await post('adv84-inner-err-down');
    expect(first.body.data).toBeNull();
    expect(first.body.errors).toEqual([
      expect.objectContaining({
        message: 'signing service unavailable',
        path: ['createOrder', 'profile', 'avatarUrl'],
      }),
      expect.objectContaining({ message: 'mail service unavailable', path: ['notify'] }),
    ]);
    signerDown = false;
    notifyFails = false;
    const again = await post('adv84-inner-err-down');
    expect(again.body).toEqual(await expected());
  });
});
