import { ApolloDriver, type ApolloDriverConfig } from '@nestjs/apollo';
import { Module } from '@nestjs/common';
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
import { type Pool } from 'pg';
import request from 'supertest';
import { IdempotencyModule, Idempotent } from '../../../lib/index.js';
import { type PoolApp, startPoolApp } from '../../support/pool-app.js';

/**
 * Adversary, round 52a: round 51a's fix has the union's `resolveType()` wrapper take the
 * replay's `__typename` off the member object before its resolvers read their parent
 * (lib/graphql/replayed-member.ts:70-72, `if (marked.__typename === member) delete
 * marked.__typename`). It cannot tell the replay's own mark from the `__typename` the APP's
 * value carried: an app that builds its union members as plain objects tagged with
 * `__typename` (what Nest's default union `resolveType()` reads, and GraphQL's own default)
 * and whose field resolvers read that tag loses it on every replay. The library even kept it
 * (`__kept`, wire-value.ts:305, restored at :714), then the wrapper deletes it.
 *
 * The app (Apollo on Express, the pool seam, no serializer): `union Outcome = Receipt |
 * Refusal` (Nest's `createUnionType`, no `resolveType`: Nest's default tells a plain object
 * by its `__typename`), members built as `{ __typename: 'Receipt', id, amount }`, and a
 * link field computed from the tag: `@ResolveField(() => String) path(@Parent() r) { return
 * \`/${r.__typename.toLowerCase()}s/${r.id}\` }`. `pay(ref)` (`@Idempotent()`) inserts a row
 * and returns the receipt. The client selects `{ __typename ... on Receipt { id path } }`.
 *
 * What happens: first answer `{ __typename: "Receipt", id, path: "/receipts/1" }`; every
 * replay `data: null` (the field is non-null) with the error "Cannot read properties of undefined (reading
 * 'toLowerCase')" at `pay.path` (the parent's `__typename` was deleted).
 *
 * Expected: the replay is the first answer, plus the replay marker.
 *
 * Controls: (1) without `@Idempotent()`: the path is answered; (2) the same receipt returned
 * by a mutation typed `Receipt` (no union, no wrapper): the replay is the first answer.
 * Both pass.
 *
 * Severity: critical (two different final answers for one key: data, then an error).
 */
let pool: Pool;

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
});

interface Tagged {
  __typename: string;
  id: number;
}

@Resolver(() => Receipt)
class ReceiptResolver {
  @ResolveField(() => String)
  path(@Parent() receipt: Tagged): string {
    return `/${receipt.__typename.toLowerCase()}s/${receipt.id}`;
  }
}

@Resolver()
class PayResolver {
  @Query(() => Int)
  ping(): number {
    return 1;
  }

  private async receipt(ref: string): Promise<Tagged & { amount: number }> {
    const { rows } = await pool.query<{ id: number }>(
      'INSERT INTO effects (ref) VALUES ($1) RETURNING id',
      [ref],
    );
    return { __typename: 'Receipt', id: rows[0].id, amount: 42 };
  }

  @Mutation(() => Outcome)
  @Idempotent()
  async pay(@Args('ref') ref: string): Promise<unknown> {
    return this.receipt(ref);
  }

  @Mutation(() => Outcome)
  async payPlain(@Args('ref') ref: string): Promise<unknown> {
    return this.receipt(ref);
  }

  @Mutation(() => Receipt)
  @Idempotent()
  async payReceipt(@Args('ref') ref: string): Promise<unknown> {
    return this.receipt(ref);
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
  providers: [PayResolver, ReceiptResolver],
})
class PayModule {}

describe("adversary 52a: a union member's own __typename is taken off on a replay", () => {
  let fixture: PoolApp;

  beforeAll(async () => {
    fixture = await startPoolApp('adv52a_own_typename', {
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

  it('control: without @Idempotent(), the path is answered', async () => {
    const first = await send(
      'p',
      'mutation { payPlain(ref: "p") { __typename ... on Receipt { id path } } }',
    );
    expect(first.body.errors).toBeUndefined();
    expect(first.body.data.payPlain.path).toMatch(/^\/receipts\/\d+$/);
  });

  it('control: no union: the replay is the first answer', async () => {
    const query = 'mutation { payReceipt(ref: "ctl") { id path } }';
    const first = await send('ctl', query);
    const replay = await send('ctl', query);
    expect(first.body.errors).toBeUndefined();
    expect(replay.body).toEqual(replayedAs(first, 'payReceipt'));
    expect(await effects('ctl')).toBe(1);
  });

  it('a union member tagged by the app: the replay is the first answer', async () => {
    const query = 'mutation { pay(ref: "u") { __typename ... on Receipt { id path } } }';
    const first = await send('u', query);
    const replay = await send('u', query);
    expect(first.body.errors).toBeUndefined();
    expect(first.body.data.pay.path).toMatch(/^\/receipts\/\d+$/);
    // Observed: data null, error "Cannot read properties of undefined".
    expect(replay.body.data).toEqual(first.body.data);
    expect(replay.body.errors).toBeUndefined();
    expect(replay.body).toEqual(replayedAs(first, 'pay'));
    expect(await effects('u')).toBe(1);
  });
});
