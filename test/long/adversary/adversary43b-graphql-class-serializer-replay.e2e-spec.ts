import { ApolloDriver, type ApolloDriverConfig } from '@nestjs/apollo';
import { ClassSerializerInterceptor, Module, SerializeOptions } from '@nestjs/common';
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
import { Exclude, Expose } from 'class-transformer';
import { type Pool } from 'pg';
import request from 'supertest';
import { IdempotencyModule, Idempotent } from '../../../lib/index.js';
import { type PoolApp, startPoolApp } from '../../support/pool-app.js';

/**
 * Adversary, round 43b: a GraphQL mutation under Nest's global `ClassSerializerInterceptor`
 * answers its fields at the first call and none of them on a replay.
 *
 * The app (Apollo on Express, the pool seam): Nest's serialization recipe, applied globally
 * (`{ provide: APP_INTERCEPTOR, useFactory: (r) => new ClassSerializerInterceptor(r,
 * { strategy: 'excludeAll' }) }`, the safe default: only what an entity `@Expose()`s leaves
 * the server, its `@Exclude()`d `pinHash` never does). Nest applies global interceptors to
 * resolvers as to routes. The entity `Card` is the GraphQL object type too, a class of data
 * only (no methods, no getters): `issueCard(holder)` inserts a row and returns `new Card(row)`
 * (`@Idempotent()` on the mutation).
 *
 * What happens: the interceptor is outside `@Idempotent()`. At the first call the library
 * stores the resolver's value (lib/graphql/run-field.ts:105-143, `outputWire`), then hands the
 * `Card` instance on, and the interceptor turns it into the plain object of its exposed fields:
 * the answer is right. On a retry the library answers the stored form, a plain object
 * (`answerOf` -> `fromWire`, run-field.ts:330-344, wire-value.ts:417-441), and the same
 * interceptor runs on it again: `classToPlain` of a plain object under `excludeAll` finds no
 * `@Expose()` metadata (its class is `Object`) and gives `{}`. GraphQL reads every field of
 * `{}` as null: `Cannot return null for non-nullable field Card.id`, and the mutation's answer
 * is `data: null`, for every retry of a card that was issued. Nothing is logged: a class of
 * data only "comes back as that data" (docs/guides/graphql.md, "What is stored"), so no replay
 * loss is said. On a route the same interceptor is harmless: a route's answer is stored as
 * written, after every interceptor around the handler.
 *
 * Expected: the replay is the first answer (`{ id, holder, last4 }`, the replay marker added),
 * one row.
 *
 * Control: the same mutation with `@SerializeOptions({ type: Card })` (Nest's option for
 * handlers that return plain objects): the interceptor makes a `Card` of the replay's plain
 * object first, and the replay is the first answer. Passes.
 *
 * Severity: critical (every retry of a done mutation answers an error, `data: null`: the
 * client never gets the stored answer; with the default strategy and `@Transform()`ed fields,
 * the replay answers the untransformed values instead).
 */
let pool: Pool;

@ObjectType()
@Exclude()
class Card {
  @Field(() => Int)
  @Expose()
  id!: number;

  @Field()
  @Expose()
  holder!: string;

  @Field()
  @Expose()
  last4!: string;

  /** Never leaves the server. */
  pinHash!: string;

  constructor(row: Partial<Card>) {
    Object.assign(this, row);
  }
}

@Resolver(() => Card)
class CardsResolver {
  @Query(() => Int)
  ping(): number {
    return 1;
  }

  private async insert(holder: string): Promise<Card> {
    const { rows } = await pool.query<Card>(
      `INSERT INTO cards (holder, last4, pin_hash) VALUES ($1, '4242', 'x9f') RETURNING id, holder, last4, pin_hash AS "pinHash"`,
      [holder],
    );
    return new Card(rows[0]);
  }

  @Mutation(() => Card)
  @Idempotent()
  issueCard(@Args('holder') holder: string): Promise<Card> {
    return this.insert(holder);
  }

  /** The control: the serializer told the class, so a plain object becomes a Card first. */
  @Mutation(() => Card)
  @Idempotent()
  @SerializeOptions({ type: Card })
  issueCardTyped(@Args('holder') holder: string): Promise<Card> {
    return this.insert(holder);
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
    CardsResolver,
    {
      provide: APP_INTERCEPTOR,
      inject: [Reflector],
      useFactory: (reflector: Reflector) =>
        new ClassSerializerInterceptor(reflector, { strategy: 'excludeAll' }),
    },
  ],
})
class CardsModule {}

describe('adversary 43b: a mutation under a global ClassSerializerInterceptor, replayed', () => {
  let fixture: PoolApp;

  beforeAll(async () => {
    fixture = await startPoolApp('adv43b_class_serializer', {
      module: CardsModule,
      max: 4,
      usePool: (started) => (pool = started),
      setup: async (admin) => {
        await admin.query(
          'CREATE TABLE cards (id serial PRIMARY KEY, holder text NOT NULL, last4 text NOT NULL, pin_hash text NOT NULL)',
        );
      },
    });
  }, 60_000);

  afterAll(() => fixture?.close());

  const rows = async (holder: string) =>
    Number(
      (await fixture.admin.query('SELECT count(*) FROM cards WHERE holder = $1', [holder])).rows[0]
        .count,
    );

  it.each([
    ['control: @SerializeOptions({ type: Card })', 'issueCardTyped'],
    ['the global serializer alone', 'issueCard'],
  ] as const)('%s: the replay is the first answer', async (_name, mutation) => {
    const holder = `adv43b-${mutation}`;
    const send = () =>
      request(fixture.app.getHttpServer())
        .post('/graphql')
        .set('Idempotency-Key', holder)
        .timeout(5_000)
        .send({ query: `mutation { ${mutation}(holder: "${holder}") { id holder last4 } }` });
    const first = await send();
    const replay = await send();
    expect(first.body).toEqual({
      data: { [mutation]: { id: expect.any(Number), holder, last4: '4242' } },
    });
    // Received (issueCard): { data: null, errors: [Cannot return null for non-nullable field
    // Card.id], extensions: { idempotency: { replayed: ['issueCard'] } } }.
    expect(replay.body).toEqual({
      ...first.body,
      extensions: { idempotency: { replayed: [mutation] } },
    });
    expect(await rows(holder)).toBe(1);
  });
});
