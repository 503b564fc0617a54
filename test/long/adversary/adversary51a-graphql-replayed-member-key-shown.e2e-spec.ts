import { ApolloDriver, type ApolloDriverConfig } from '@nestjs/apollo';
import { ClassSerializerInterceptor, Module } from '@nestjs/common';
import { APP_INTERCEPTOR, Reflector } from '@nestjs/core';
import {
  Args,
  createUnionType,
  Field,
  GraphQLModule,
  Int,
  Mutation,
  ObjectType,
  Parent,
  Query,
  ResolveField,
  Resolver,
} from '@nestjs/graphql';
import { GraphQLScalarType } from 'graphql';
import { type Pool } from 'pg';
import request from 'supertest';
import { IdempotencyModule, Idempotent } from '../../../lib/index.js';
import { type PoolApp, startPoolApp } from '../../support/pool-app.js';

/**
 * Adversary, round 51a: round 50a's union-member mark (`__replayedMember`, an ENUMERABLE own
 * string key, lib/graphql/replayed-member.ts:29-34, set by `answerAsMember` from `fromWire`,
 * lib/graphql/wire-value.ts:629) reaches the client through a field resolver that reads
 * its parent whole. The guide says the mark is "data a serializer copies along, never written
 * to the answer"; but a `@ResolveField()` is handed that very object (or the serializer's copy
 * of it, which copies the key along, as round 50a meant it to).
 *
 * The app (Apollo on Express, the pool seam, Nest's global `ClassSerializerInterceptor`): a
 * union `Outcome = Receipt | Refusal` (resolveType by data: `'amount' in value`), `@ObjectType()
 * Receipt { id; amount }`, and on Receipt a `@ResolveField(() => JSON) snapshot(@Parent() r)`
 * that returns its parent (an audit/debug view of what the mutation answered; the JSON scalar
 * as graphql-type-json writes it). `pay(ref)` (`@Idempotent()`) inserts a row and returns a
 * `Receipt`. The client selects `{ __typename ... on Receipt { id snapshot } }`.
 *
 * What happens: first answer `snapshot: { id, amount: 42 }`; every replay `snapshot: { id,
 * amount: 42, __typename: "Receipt", __replayedMember: "Receipt" }` (the library's own
 * bookkeeping written into the app's data; `__typename` is the stored wire's, also own and
 * enumerable on the replay's object).
 *
 * Expected: the replay is the first answer, plus the replay marker.
 *
 * Control: the same `Receipt` returned by a mutation typed `Receipt` (no union): the replay is
 * the first answer. Passes.
 *
 * Severity: critical (two different final answers for one key).
 */
let pool: Pool;

const GraphQLJSON = new GraphQLScalarType({
  name: 'JSON',
  serialize: (value) => value,
  parseValue: (value) => value,
});

@ObjectType()
class Receipt {
  @Field(() => Int)
  id!: number;

  @Field(() => Int)
  amount!: number;
}

@ObjectType()
class Refusal {
  @Field()
  reason!: string;
}

const Outcome = createUnionType({
  name: 'Outcome',
  types: () => [Receipt, Refusal] as const,
  resolveType(value: object) {
    return 'amount' in value ? Receipt : Refusal;
  },
});

@Resolver(() => Receipt)
class ReceiptResolver {
  @ResolveField(() => GraphQLJSON)
  snapshot(@Parent() receipt: Receipt): unknown {
    return receipt;
  }
}

@Resolver()
class PayResolver {
  @Query(() => Int)
  ping(): number {
    return 1;
  }

  private async insert(ref: string): Promise<number> {
    const { rows } = await pool.query<{ id: number }>(
      'INSERT INTO effects (ref) VALUES ($1) RETURNING id',
      [ref],
    );
    return rows[0].id;
  }

  @Mutation(() => Outcome)
  @Idempotent()
  async pay(@Args('ref') ref: string): Promise<typeof Outcome> {
    return Object.assign(new Receipt(), { id: await this.insert(ref), amount: 42 });
  }

  @Mutation(() => Receipt)
  @Idempotent()
  async payReceipt(@Args('ref') ref: string): Promise<Receipt> {
    return Object.assign(new Receipt(), { id: await this.insert(ref), amount: 42 });
  }
}

@Module({
  imports: [
    IdempotencyModule.forRootAsync({ useFactory: () => ({ globalKeys: true, pool }) }),
    GraphQLModule.forRoot<ApolloDriverConfig>({
      driver: ApolloDriver,
      autoSchemaFile: true,
      graphiql: false,
      includeStacktraceInErrorResponses: false,
    }),
  ],
  providers: [
    PayResolver,
    ReceiptResolver,
    {
      provide: APP_INTERCEPTOR,
      inject: [Reflector],
      useFactory: (reflector: Reflector) => new ClassSerializerInterceptor(reflector),
    },
  ],
})
class PayModule {}

describe('adversary 51a: the union-member mark reaches a field resolver that reads its parent', () => {
  let fixture: PoolApp;

  beforeAll(async () => {
    fixture = await startPoolApp('adv51a_replayed_member_key', {
      module: PayModule,
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
      .timeout(10_000)
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

  it('control: no union: the replay is the first answer', async () => {
    const query = 'mutation { payReceipt(ref: "ctl") { id snapshot } }';
    const first = await send('ctl', query);
    const replay = await send('ctl', query);
    expect(first.body.data.payReceipt.snapshot).toEqual({ id: expect.any(Number), amount: 42 });
    expect(replay.body).toEqual(replayedAs(first, 'payReceipt'));
    expect(await effects('ctl')).toBe(1);
  });

  it('a union member: the replay is the first answer', async () => {
    const query = 'mutation { pay(ref: "u") { __typename ... on Receipt { id snapshot } } }';
    const first = await send('u', query);
    const replay = await send('u', query);
    expect(first.body.errors).toBeUndefined();
    expect(first.body.data.pay.snapshot).toEqual({ id: expect.any(Number), amount: 42 });
    // Observed: snapshot also has __typename and __replayedMember: "Receipt".
    expect(replay.body.data?.pay?.snapshot).toEqual(first.body.data.pay.snapshot);
    expect(replay.body).toEqual(replayedAs(first, 'pay'));
    expect(await effects('u')).toBe(1);
  });
});
